// xkernels — errors. Every public entry point validates its arguments before doing any work and
// reports bad input as xk::Error, whose message names the argument and the offending value.
#pragma once
#include <stdexcept>
#include <string>

namespace xk {

enum class Status : int {
    success = 0,
    invalid_argument = 1,  // a size, pointer, stride, index or option is wrong
    unsupported = 2,       // a valid request this build/implementation does not offer
    isa_unavailable = 3,   // an ISA was asked for that this machine (or the cap) does not allow
    out_of_memory = 4,
    runtime_error = 5,     // a dependency (oneDNN, OpenCL, the OS) failed
};

const char* status_name(Status s) noexcept;

class Error : public std::runtime_error {
public:
    Error(Status code, const std::string& message) : std::runtime_error(message), code_(code) {}
    Status code() const noexcept { return code_; }

private:
    Status code_;
};

}  // namespace xk
