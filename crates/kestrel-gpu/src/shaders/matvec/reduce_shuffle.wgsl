// The butterfly's stages below the subgroup size, in registers.
while (k > 0u) {
        s = s + subgroupShuffleXor(s, k);
        k >>= 1u;
    }
