// The Linux AMX permission refused: a process whose arch_prctl(ARCH_REQ_XCOMP_PERM) fails (a
// seccomp filter answers EPERM, as a container or sandbox policy may) must never execute a tile
// instruction (it would die of SIGILL): cpu_info() reports the permission missing, the amx level is
// not supported, and GEMMs that would take the AMX kernels run the vector ones, correctly.
//
// The check runs in a child process (this binary again, with XK_TEST_AMX_CHILD=1 and the filter
// installed before exec, so the child's first feature detection meets the refusal). On machines
// without AMX the child still runs and checks the same things (the refusal changes nothing there).
#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "xk/gemm.hpp"
#include "xk/isa.hpp"
#include "xk/types.hpp"

using namespace xk;

namespace {

constexpr int kArchReqXcompPerm = 0x1023;

// arch_prctl(ARCH_REQ_XCOMP_PERM, ...) -> EPERM; every other system call allowed.
bool refuse_amx_permission() {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_arch_prctl, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArchReqXcompPerm, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

float to_f(bf16 v) { return static_cast<float>(v); }

}  // namespace

// The child's side (skipped unless this process is the child).
TEST(AmxPermission, ChildRefused) {
    if (!std::getenv("XK_TEST_AMX_CHILD")) GTEST_SKIP() << "runs in the child of AmxPermission.RefusedNeverRunsTiles";
    // The filter answers as the kernel would refuse.
    EXPECT_EQ(syscall(SYS_arch_prctl, kArchReqXcompPerm, 18), -1);
    const CpuInfo& c = cpu_info();
    EXPECT_FALSE(c.amx_permission);
    EXPECT_FALSE(isa_supported(Isa::amx));
    EXPECT_LT(hardware_isa(), Isa::amx);
    // A bf16 GEMM the AMX kernel would take (M >= 32): runs, right, and not on the tiles.
    const int64_t M = 64, N = 48, K = 80;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<bf16> A(M * K), B(K * N);
    for (auto& v : A) v = bf16(u(rng));
    for (auto& v : B) v = bf16(u(rng));
    std::vector<float> C(M * N, 0.0f);
    GemmDesc d;
    d.M = M, d.N = N, d.K = K;
    d.a_type = d.b_type = DType::bf16;
    const GemmPlan plan(d);
    EXPECT_NE(std::string(plan.impl_name()).rfind("amx", 0), 0u) << plan.impl_name();
    plan.run({A.data(), B.data(), C.data()});
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double want = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double p = double(to_f(A[m * K + k])) * to_f(B[k * N + n]);
                want += p, mag += std::fabs(p);
            }
            ASSERT_NEAR(C[m * N + n], want, 2 * (K + 5) * 0x1p-24 * mag) << "m=" << m << " n=" << n;
        }
}

TEST(AmxPermission, RefusedNeverRunsTiles) {
    if (std::getenv("XK_TEST_AMX_CHILD")) GTEST_SKIP() << "(the child)";
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    ASSERT_GT(len, 0);
    self[len] = 0;
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (!refuse_amx_permission()) _exit(3);
        setenv("XK_TEST_AMX_CHILD", "1", 1);
        execl(self, self, "--gtest_filter=AmxPermission.ChildRefused", static_cast<char*>(nullptr));
        _exit(4);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                   << " (SIGILL = " << SIGILL << ": a tile instruction without the permission)";
    EXPECT_NE(WEXITSTATUS(status), 3) << "could not install the seccomp filter";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's checks failed (its output is above)";
    std::printf("[xk] AMX permission refused in a child: amx %s on this machine, the child passed\n",
                cpu_info().amx_tile ? "present" : "absent");
}
