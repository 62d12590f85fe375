"""Address layout of the fork servers: no randomisation, and declared perturbations drawn from the seed.

The caller starts every fork server with ``ADDR_NO_RANDOMIZE`` (``no_randomization``, the personality
``setarch -R`` sets), so a server's addresses are a function of the installation and of what the
process did, not of the kernel's random draw at ``exec``. Output that depends on an address
(``id()``, the default ``repr`` ``<object at 0x...>``, the order of a set of objects hashed by
address) must still differ between the determinism check's replicas, which run on servers of
different hash seeds; so each server moves its layout by amounts drawn from its hash seed, and by
nothing else:

* **stack**: the caller pads the server's environment with ``PAD_VARIABLE`` (``environment``): the
  initial stack, and every C stack address under it, moves by up to ``STACK_PAD`` bytes;
* **mappings**: a ``PROT_NONE`` reservation of up to ``MAP_PAGES`` pages, made before the preloads,
  moves every later mapping (extension modules, pymalloc arenas, the frames' data stack);
* **malloc**: a kept block of up to ``HEAP_BYTES`` bytes moves what the C heap allocates after it;
* **pymalloc and the free lists**: for each small-object size class and for the free lists of
  lists, dicts, tuples and floats, a drawn number of objects is allocated after the preloads and
  kept, so the next block each of them hands out is another.

The 16 random bytes the kernel hands every ``exec`` (``AT_RANDOM``, read once by libc at start-up
for its stack-protector canary and pointer guard) are overwritten with bytes drawn from the seed
(``fix_exec_random``); the canary and pointer guard themselves stay (changing them under live
frames would abort the process): machine code that reads them gets a per-``exec`` random value.

Two servers of the same seed have the same layout: a program's addresses are a function of its
code, its inputs and the hash seed (on one installation). ``perturb`` runs in the fork server before the
template is forked (``template.py``); children pay nothing for it.

Standard library only: the fork server imports it as a top-level module; the caller uses
``environment`` and ``no_randomization``.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import random

PAD_VARIABLE = "POPULORA_LAYOUT"
STACK_PAD = 4096  # bytes of environment padding, at most
MAP_PAGES = 512  # pages of PROT_NONE reservation, at most (2 MiB of address space, no memory)
HEAP_BYTES = 1 << 16  # bytes of the kept malloc block, at most
SIZE_CLASSES = range(16, 513, 16)  # pymalloc's size classes on 64-bit builds
CLASS_BYTES = 1 << 16  # bytes kept per size class, at most: the next block moves by up to 64 KiB
BLOCKS = 256  # objects kept per free list (lists, dicts, tuples, floats), at most
ADDR_NO_RANDOMIZE = 0x0040000


def draws(seed: int) -> random.Random:
    """The perturbations' random stream: a pure function of the server's hash seed."""
    return random.Random(f"populora-layout:{int(seed)}")  # a str seed goes through SHA-512


def environment(seed: int) -> dict[str, str]:
    """The padding variable of a server with hash seed ``seed`` (the caller adds it to its environment)."""
    return {PAD_VARIABLE: "x" * draws(seed).randrange(STACK_PAD)}


@contextlib.contextmanager
def no_randomization():
    """Processes the calling thread starts in this block are ``exec``'d without address randomisation.

    The personality is per thread (it is inherited by children), so other threads of the caller are
    untouched. Yields whether it was set (a container's seccomp profile may refuse ``personality``).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    old = libc.personality(0xFFFFFFFF)
    ok = old != -1 and libc.personality(old | ADDR_NO_RANDOMIZE) != -1
    try:
        yield ok
    finally:
        if ok:
            libc.personality(old)


_kept: list = []  # what perturb allocated, alive as long as the server


def perturb_mappings(seed: int) -> dict:
    """Before the preloads: the mapping reservation and the malloc block."""
    rng = draws(seed)
    rng.randrange(STACK_PAD)  # the caller's draw
    pages = rng.randrange(MAP_PAGES)
    heap = rng.randrange(HEAP_BYTES // 16) * 16
    if pages:
        _kept.append(mmap.mmap(-1, pages * mmap.PAGESIZE, prot=0))  # PROT_NONE
    _kept.append(ctypes.create_string_buffer(max(heap, 1)))  # malloc'd (over pymalloc's 512 bytes)
    return {"map_pages": pages, "heap_bytes": heap}


def fix_exec_random(seed: int) -> None:
    """Overwrite the kernel's ``AT_RANDOM`` bytes of this process with bytes drawn from the seed."""
    libc = ctypes.CDLL(None)
    libc.getauxval.restype = ctypes.c_void_p
    libc.getauxval.argtypes = [ctypes.c_ulong]
    where = libc.getauxval(25)  # AT_RANDOM
    if where:
        ctypes.memmove(where, random.Random(f"populora-at-random:{int(seed)}").randbytes(16), 16)


def perturb_objects(seed: int) -> dict:
    """After the preloads: a drawn number of kept objects per size class and free list."""
    rng = draws(seed + 1)
    kept, counts = [], {}
    for size in SIZE_CLASSES:  # a bytes object of length n takes 33 + n bytes
        n = counts[size] = rng.randrange(CLASS_BYTES // size)
        if size == 16:
            kept.extend(object() for _ in range(n))
        elif size == 32:
            kept.extend((1 << 40) + i for i in range(n))  # two-digit ints: 32 bytes
        else:
            kept.extend(bytes(size - 33) for _ in range(n))
    for name, make in (("list", list), ("dict", dict), ("float", lambda i: i + 0.5),
                       ("tuple1", lambda i: (i,)), ("tuple2", lambda i: (i, i)), ("tuple3", lambda i: (i, i, i))):
        n = counts[name] = rng.randrange(BLOCKS)
        kept.extend(make() if make in (list, dict) else make(i) for i in range(n))
    _kept.append(kept)
    return {"objects": sum(counts.values())}
