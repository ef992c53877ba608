// Every translation unit that includes xbyak does it through this header, so that the
// configuration (exceptions on, no global "using") is the same everywhere.
#pragma once
#include <xbyak/xbyak.h>
#include <xbyak/xbyak_util.h>
