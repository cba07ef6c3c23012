// A CPU stand-in for the CUDA features ferro's kernels use, so tests can run the real kernel
// sources on machines without a GPU (compiled with g++ by tests/cuda/test_kernels_emulated.py).
//
// Each block runs as blockDim threads (std::thread, reused from block to block); blocks run one
// after another, so static variables stand in for __shared__ memory and atomics across blocks
// are trivially ordered.
// __syncthreads is a barrier that, as on Volta and later, stops counting a thread once it has
// returned; __shfl_xor_sync exchanges through a block-wide buffer between two barriers (every
// thread of the block must call it together, which ferro's kernels do). A barrier that waits
// longer than a few seconds (threads diverging around a __syncthreads) marks the launch broken
// and releases everyone, so a bad kernel fails its test instead of hanging it.
#pragma once
#include <math.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) double2 {
    double x, y;
};

thread_local dim3 threadIdx, blockIdx;
thread_local int emu_tid;
dim3 blockDim, gridDim;

struct EmuBarrier {
    std::mutex m;
    std::condition_variable cv;
    int expected = 0, count = 0;
    unsigned long gen = 0;
    bool broken = false;

    void wait() {
        std::unique_lock<std::mutex> lock(m);
        if (broken) return;
        const unsigned long g = gen;
        if (++count == expected) {
            count = 0;
            gen++;
            cv.notify_all();
            return;
        }
        if (!cv.wait_for(lock, std::chrono::seconds(5), [&] { return gen != g || broken; })) {
            broken = true;  // some threads never arrive: divergent __syncthreads
            cv.notify_all();
        }
    }
    void drop() {  // a thread returned from the kernel
        std::unique_lock<std::mutex> lock(m);
        expected--;
        if (expected > 0 && count == expected) {
            count = 0;
            gen++;
            cv.notify_all();
        }
    }
};

EmuBarrier* emu_barrier;
std::vector<double> emu_xchg;
bool emu_failed = false;

inline void __syncthreads() { emu_barrier->wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popc(int v) { return __builtin_popcount((unsigned)v); }
inline double __longlong_as_double(long long v) {
    double d;
    std::memcpy(&d, &v, sizeof d);
    return d;
}

template <typename T> T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    emu_xchg[emu_tid] = (double)v;  // float and double both round-trip exactly
    __syncthreads();
    const int lane = emu_tid & 31;
    const T r = (T)emu_xchg[emu_tid - lane + (lane ^ lane_mask)];
    __syncthreads();
    return r;
}

template <typename... A, size_t... I>
void emu_call(void (*k)(A...), void** p, std::index_sequence<I...>) {
    k(*static_cast<A*>(p[I])...);
}

// Launch k over grid x block with CUDA-style parameters (p[i] points at argument i).
// One OS thread per thread of a block, reused for every block in turn. Returns 0, or 1 when a
// barrier broke.
template <typename... A> int emu_launch(void (*k)(A...), dim3 grid, dim3 block, void** p) {
    blockDim = block;
    gridDim = grid;
    const int n = block.x * block.y * block.z;
    emu_xchg.assign(n, 0.0);
    EmuBarrier bar, block_end;
    bar.expected = block_end.expected = n;
    emu_barrier = &bar;
    bool failed = false;
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (int t = 0; t < n; t++) {
        threads.emplace_back([&, t] {
            emu_tid = t;
            threadIdx = dim3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            for (unsigned bz = 0; bz < grid.z; bz++)
                for (unsigned by = 0; by < grid.y; by++)
                    for (unsigned bx = 0; bx < grid.x; bx++) {
                        blockIdx = dim3{bx, by, bz};
                        emu_call(k, p, std::index_sequence_for<A...>{});
                        bar.drop();
                        block_end.wait();  // every thread is done with this block
                        if (t == 0) {      // re-arm __syncthreads for the next block
                            failed |= bar.broken;
                            bar.expected = n;
                            bar.count = 0;
                            bar.broken = false;
                        }
                        block_end.wait();
                    }
        });
    }
    for (auto& th : threads) th.join();
    return failed || block_end.broken;
}

#define EMU_KERNEL(SYM, ...)                                                                \
    extern "C" int SYM(unsigned gx, unsigned gy, unsigned bx, unsigned by, void** p) {     \
        return emu_launch(__VA_ARGS__, dim3{gx, gy, 1}, dim3{bx, by, 1}, p);                \
    }
