/* FERRO_CLONES: compile a function once per x86-64 ISA level and pick one at load time.
 *
 * A loop whose float32 body is arithmetic only (gelu's erf and exp, the norm kernels' rows) runs
 * 2-4x faster in AVX2 or AVX-512 than in the x86-64 baseline's SSE2, which is all a portable
 * build may assume. gcc on x86-64 Linux with glibc clones a FERRO_CLONES function per level
 * (ifunc); elsewhere it is one ordinary function. An OpenMP region's body is not cloned with its
 * function: call a cloned function on a chunk from inside the region instead. It is ferro's one
 * such mechanism: a hand-written AVX2 dispatcher that the tanh-gelu and LSTM/GRU loops had is
 * gone (on AVX-512 these clones run those loops 1.2-2x faster than it did).
 */
#ifndef FERRO_SIMD_H
#define FERRO_SIMD_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#include <features.h> /* __GLIBC__: ifunc needs glibc's loader (musl has none) */
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define FERRO_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FERRO_CLONES
#endif

/* FERRO_INLINE: a helper called from a FERRO_CLONES function. gcc may keep a plain `static inline`
 * helper out of line, and then it is compiled once, for the baseline ISA (SSE2), so the cloned
 * caller's loop runs at a quarter of its speed in it: the norm backward's row sums did. */
#if defined(__GNUC__)
#define FERRO_INLINE static inline __attribute__((always_inline))
#else
#define FERRO_INLINE static inline
#endif

#endif
