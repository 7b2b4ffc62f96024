// SPDX-License-Identifier: MIT
/// \file
/// Silences two GCC warnings about Eigen's x86 packets in the code between
/// LINATTN_PACKET_WARNINGS_OFF and LINATTN_PACKET_WARNINGS_ON: a PacketBlock of an x86
/// vector type drops the type's alignment attribute (-Wignored-attributes; harmless, the
/// blocks live in registers), and GCC 12's _mm512_undefined_ps/pd, inlined through Eigen's
/// AVX-512 transposes and reductions, trips -Wuninitialized under -Wall (GCC bug 105593).
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#define LINATTN_PACKET_WARNINGS_OFF                                  \
  _Pragma("GCC diagnostic push")                                     \
  _Pragma("GCC diagnostic ignored \"-Wignored-attributes\"")         \
  _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define LINATTN_PACKET_WARNINGS_ON _Pragma("GCC diagnostic pop")
#else
#define LINATTN_PACKET_WARNINGS_OFF
#define LINATTN_PACKET_WARNINGS_ON
#endif
