#pragma once
// The CPU vendor, for the defaults measured per vendor (prefetch hints and distances, kernel
// forms): one place instead of a string compare in every kernel. Read once from cpu_info().
namespace xk::detail {
bool cpu_is_amd();    // cpu_info().vendor == "AuthenticAMD"
bool cpu_is_intel();  // cpu_info().vendor == "GenuineIntel"
}  // namespace xk::detail
