// embedding_gather: out[t, :] = table[idx[t], :] for n_tokens int32 token ids and rows of
// dim floats; one output element per thread (indices are trusted to be in range).
extern "C" __global__ void embedding_gather(const int* idx, const float* table, float* out,
                                            unsigned n_tokens, unsigned dim) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_tokens * dim) return;
    const unsigned t = i / dim;
    const unsigned c = i - t * dim;
    out[i] = table[(size_t)idx[t] * dim + c];
}
