#!/usr/bin/python3
"""An independent model of nb_randperm (include/nabla/tensor.h), for the permutations
tests/test_data.c pins: splitmix64 seeding, xoshiro256**, and Fisher-Yates from the top with
rejection sampling, all arithmetic mod 2^64. Prints C initialisers.
Run: /usr/bin/python3 tests/randperm_model.py"""

M = (1 << 64) - 1


def seed(s):
    state = []
    for _ in range(4):
        s = (s + 0x9E3779B97F4A7C15) & M
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        state.append(z ^ (z >> 31))
    return state


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M


def next_u64(s):
    result = (rotl((s[1] * 5) & M, 7) * 9) & M
    t = (s[1] << 17) & M
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = rotl(s[3], 45)
    return result


def below(s, span):
    limit = M - M % span
    while True:
        r = next_u64(s)
        if r < limit:
            return r % span


def randperm(s, n):
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        j = below(s, i + 1)
        p[i], p[j] = p[j], p[i]
    return p


if __name__ == "__main__":
    s = seed(42)
    print("seed 42, n 10, twice from one generator:")
    print("{" + ", ".join(map(str, randperm(s, 10))) + "}")
    print("{" + ", ".join(map(str, randperm(s, 10))) + "}")
    s = seed(7)
    print("seed 7, n 1, then n 5:", randperm(s, 1), randperm(s, 5))
