// Dropout masks from a counter-based generator: element i of a draw with (seed, offset) gets
// the uint32 hash of (seed, offset + i), so a device generator's state is just (seed, offset)
// and checkpointing replays a mask by restoring it. mask = keep / (1 - p) where keep is
// hash >= threshold (threshold = p * 2^32), the same rule as the CPU path.

__device__ unsigned int ferro_hash(unsigned long long seed, unsigned long long counter) {
    // splitmix64 of the pair, folded to 32 bits
    unsigned long long z = seed * 0x9E3779B97F4A7C15ULL + counter + 0x632BE59BD9B4E019ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z = z ^ (z >> 31);
    return (unsigned int)(z ^ (z >> 32));
}

template <typename T>
__global__ void ferro_dropout_mask(T* __restrict__ mask, long long n, unsigned long long seed,
                                   unsigned long long offset, unsigned int threshold, T scale) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        mask[i] = ferro_hash(seed, offset + (unsigned long long)i) >= threshold ? scale : T(0);
    }
}
