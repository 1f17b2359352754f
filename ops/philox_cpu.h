/// \file
/// Philox blocks for the CPU kernels (dropout, the fused attention kernels'
/// dropout): the words of core/random.h's philox_block<16> and <64>, computed
/// in AVX-512 registers when the CPU running the program has AVX-512 (CPUID,
/// checked once) and by the portable loop otherwise.
///
/// Out of line on purpose: an inline function whose body depended on the
/// build's -march would differ between Ember and a program compiled with
/// other flags (two definitions of one function). Here the choice is made at
/// run time inside the library, so neither Ember's flags nor a program's
/// matter.
#pragma once

#include <cstdint>

namespace ember::cpu {

/// philox_block<16>(seed, c0, out): counters c0 .. c0+15 in element order.
void philox_block16(uint64_t seed, uint64_t c0, uint32_t (&out)[64]);
/// philox_block<64>(seed, c0, out): counters c0 .. c0+63 in element order.
void philox_block64(uint64_t seed, uint64_t c0, uint32_t (&out)[256]);

}  // namespace ember::cpu
