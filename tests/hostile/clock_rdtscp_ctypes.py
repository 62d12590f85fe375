# attack: issue 37: rdtscp (the counter and the CPU number) from machine code through ctypes
# expect: error refused:clock
# validate: refused:clock
# calls: ["0"]
# ruff: noqa
import ctypes, mmap
def f(x):
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(b"\x0f\x01\xf9\x48\xc1\xe2\x20\x48\x09\xd0\xc3")  # rdtscp; shl rdx, 32; or rax, rdx; ret
    rdtscp = ctypes.CFUNCTYPE(ctypes.c_uint64)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    return rdtscp() >> 33
