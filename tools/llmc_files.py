# The inputs that tools/gpt2_compare.py (llm.c's CPU trainer) and
# tools/gpt2_compare_cuda.py (its CUDA trainer) give llm.c and Ember: token
# files in llm.c's format, and the order in which llm.c's loader visits the
# batches of one. Both trainers read tokens through llmc/dataloader.h, which
# shuffles the batches of its file (a Mersenne Twister seeded 42, numerically
# torch's, and a Fisher-Yates pass over the batch indices) and reads batch j
# as tokens [j B T, j B T + B T + 1). So the training file holds N segments
# of B T tokens, each starting with a newline, and a final newline: every
# batch is one segment plus a newline as its last target, whatever the
# order. Ember gets a file of the segments in llm.c's order, read without
# shuffling. A wrong order would show as losses far apart.
import random

import numpy as np


def mt19937(seed):
    """A Mersenne Twister seeded as torch's manual_seed (init_genrand), as Python's Random."""
    s = [seed & 0xFFFFFFFF]
    for j in range(1, 624):
        s.append((1812433253 * (s[-1] ^ (s[-1] >> 30)) + j) & 0xFFFFFFFF)
    r = random.Random()
    r.setstate((3, tuple(s) + (624,), None))
    return r


assert mt19937(137).getrandbits(32) == 4053805790  # torch.manual_seed(137); torch.randint(0, 2**32 - 1, [1])


def llmc_order(n):
    """The batch indices llm.c's loader visits in its first epoch over n batches."""
    r, perm = mt19937(42), list(range(n))
    for i in range(n - 1, 0, -1):
        j = r.getrandbits(32) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def write_tokens(path, toks):
    """A token file in llm.c's format: a 256-int32 header (magic 20240520, version 1, count), uint16 tokens."""
    h = np.zeros(256, np.int32)
    h[:3] = [20240520, 1, len(toks)]
    with open(path, "wb") as f:
        f.write(h.tobytes())
        f.write(np.asarray(toks, np.uint16).tobytes())


def batch_files(text_path, n, B, T, llmc_path, ember_path):
    """Writes llm.c's training file of n batches of B x T byte tokens from text_path, and Ember's file of the same
    batches in the order llm.c visits them. Returns that order; None when the text is too short."""
    text = np.frombuffer(open(text_path, "rb").read(), np.uint8).astype(np.uint16)
    segments, pos = [], 0
    for _ in range(n):
        start = pos + int(np.argmax(text[pos:] == 10))  # the next newline
        if text[start] != 10 or start + B * T > len(text):
            return None
        segments.append(text[start:start + B * T])
        pos = start + B * T
    newline = np.array([10], np.uint16)
    write_tokens(llmc_path, np.concatenate(segments + [newline]))
    order = llmc_order(n)
    write_tokens(ember_path, np.concatenate([segments[j] for j in order] + [newline]))
    return order
