#include <xk/xk.h>

#include <stdio.h>
#include <string.h>

int main(void) {
    float x[5] = {1, 2, 3, 4, 5}, y[5] = {1, 1, 1, 1, 1};
    if (xk_axpby(5, 2.0f, x, 1.0f, y) != XK_SUCCESS || y[4] != 11.0f) {
        printf("consumer (C): axpby failed: %s\n", xk_last_error());
        return 1;
    }
    if (xk_axpby(-3, 1.0f, x, 1.0f, y) != XK_INVALID_ARGUMENT || strstr(xk_last_error(), "n=-3") == NULL) {
        printf("consumer (C): expected XK_INVALID_ARGUMENT naming n=-3, got '%s'\n", xk_last_error());
        return 1;
    }
    xk_isa isa;
    xk_get_max_isa(&isa);
    printf("consumer (C): xkernels %s, max ISA %s; error path ok: %s\n", xk_version(), xk_isa_name(isa), xk_last_error());
    return 0;
}
