"""No clock in a sandbox child: ``rdtsc`` faults, the kernel's clock pages are gone, the vDSO is ours.

A Linux process reads the time without a system call, where seccomp cannot see it, in two ways:
the ``rdtsc``/``rdtscp`` instructions, and the vDSO, the kernel's code page whose functions
(``clock_gettime``, ``gettimeofday``, ``time``, ``getcpu``, ``getrandom``) read the kernel's clock
data from the ``[vvar]`` pages mapped beside it (the coarse clocks and ``time()`` read that data
without ``rdtsc``: measured, they still worked after ``PR_SET_TSC`` here). So in the template
process every child is forked from (``template.py``), once, before any program:

* ``prctl(PR_SET_TSC, PR_TSC_SIGSEGV)``: ``rdtsc`` and ``rdtscp`` fault (inherited by every child);
* the ``[vvar]`` pages are unmapped: reading the kernel's clock data faults;
* the ``[vdso]`` is replaced, at its address, by a code page of ours (libc keeps the function
  addresses it found at start-up): each function ends the process with the exit status
  ``CLOCK_EXIT`` (reported as ``refused:clock``), or ``ENTROPY_EXIT`` for ``getcpu`` and
  ``getrandom`` (``refused:entropy``), except ``clock_gettime(CLOCK_MONOTONIC)``, which returns
  the frozen time ``FROZEN_SECONDS``: CPython 3.11 reads the monotonic clock on every lock
  acquisition, a buffered file's read and write included, so a fault there would break ordinary
  I/O, while a clock that never moves tells a program nothing;
* a SIGSEGV handler (machine code on a page of its own, installed in the fork server and
  inherited) turns a fault on ``rdtsc``/``rdtscp`` or on an address of the removed clock pages into
  ``CLOCK_EXIT``; any other fault still kills the process with SIGSEGV (the handler resets itself
  and returns, and the instruction faults again).

The system calls that read or wait on a clock are refused by the seccomp filter (``seccomp.py``).
x86-64 only (the machine code, and ``PR_SET_TSC``); elsewhere nothing here is done and
``Sandbox.report["clock"]`` says so.

Standard library only: the fork server imports it as a top-level module.
"""

from __future__ import annotations

import ctypes
import os
import signal
import struct

CLOCK_EXIT = 125  # a child that read a clock (results.py: refused:clock)
ENTROPY_EXIT = 126  # a child that asked for entropy or its CPU number (results.py: refused:entropy)
FROZEN_SECONDS = 1  # what clock_gettime(CLOCK_MONOTONIC) returns in a child, always
CLOCK_MONOTONIC = 1
ENTROPY_FUNCTIONS = ("getcpu", "getrandom")  # vDSO functions that are not clocks

PR_SET_TSC, PR_TSC_SIGSEGV = 26, 2
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS = 2, 0x20
MREMAP_MAYMOVE, MREMAP_FIXED = 1, 2
SA_SIGINFO, SA_RESETHAND = 4, 0x80000000
PAGE = os.sysconf("SC_PAGE_SIZE")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mremap.restype = ctypes.c_void_p
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.getauxval.restype = ctypes.c_ulong
_libc.getauxval.argtypes = [ctypes.c_ulong]
AT_SYSINFO_EHDR = 33


def supported() -> bool:
    return os.uname().machine == "x86_64"


def special_mappings() -> dict[str, list[tuple[int, int]]]:
    """The kernel's special mappings of this process from ``/proc/self/maps``: ``{"[vdso]": [(start,
    end)], "[vvar]": [...], "[vvar_vclock]": [...]}`` (read before the fork server hides ``/proc``;
    its inner server and the template are forks, so the addresses hold there)."""
    found: dict[str, list[tuple[int, int]]] = {}
    with open("/proc/self/maps") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) == 6 and fields[5].startswith(("[vdso", "[vvar")):
                start, end = (int(x, 16) for x in fields[0].split("-"))
                found.setdefault(fields[5], []).append((start, end))
    return found


def _sections(image: bytes) -> list[tuple]:
    """The ELF64 section headers of ``image``: (name, type, flags, addr, offset, size, link, info,
    align, entsize) each."""
    if image[:4] != b"\x7fELF" or image[4] != 2:
        raise ValueError("the vDSO is not a 64-bit ELF image")
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
    return [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]


def vdso_functions(image: bytes) -> dict[str, int]:
    """Offsets of the vDSO's functions, from its ELF dynamic symbol table."""
    sections = _sections(image)
    out = {}
    for _, kind, _, _, offset, length, link, _, _, entsize in sections:
        if kind != 11:  # SHT_DYNSYM
            continue
        strtab = sections[link][4]
        for pos in range(offset, offset + length, entsize):
            name_at, info, _, _, value, _ = struct.unpack_from("<IBBHQQ", image, pos)
            if info & 0xF == 2 and value:  # STT_FUNC
                end = image.index(b"\0", strtab + name_at)
                out[image[strtab + name_at:end].decode()] = value
    return out


def _exit_stub(code: int) -> bytes:
    return b"\xbf" + struct.pack("<I", code) + b"\xb8\xe7\x00\x00\x00\x0f\x05"  # mov edi; mov eax, 231; syscall


def _monotonic_stub() -> bytes:
    """clock_gettime(clk, ts): CLOCK_MONOTONIC gives FROZEN_SECONDS.0, any other clock exits."""
    body = (b"\x48\xc7\x06" + struct.pack("<i", FROZEN_SECONDS)  # mov qword [rsi], FROZEN_SECONDS
            + b"\x48\xc7\x46\x08\x00\x00\x00\x00"  # mov qword [rsi+8], 0
            + b"\x31\xc0\xc3")  # xor eax, eax; ret
    return b"\x83\xff" + bytes([CLOCK_MONOTONIC]) + b"\x75" + bytes([len(body)]) + body + _exit_stub(CLOCK_EXIT)


def replacement_vdso(image: bytes) -> bytes:
    """The sandbox's vDSO: the kernel's image with every executable section filled with ``int3``
    and a stub at each function's offset. Its ELF data (symbols, hash tables) is kept: the dynamic
    loader searches the vDSO's symbols whenever a library is loaded."""
    page = bytearray(image)
    for _, _, flags, _, offset, length, _, _, _, _ in _sections(image):
        if flags & 0x4:  # SHF_EXECINSTR
            page[offset:offset + length] = b"\xcc" * length
    for name, offset in vdso_functions(image).items():
        short = name.removeprefix("__vdso_")
        if short == "clock_gettime":
            stub = _monotonic_stub()
        else:
            stub = _exit_stub(ENTROPY_EXIT if short in ENTROPY_FUNCTIONS else CLOCK_EXIT)
        page[offset:offset + len(stub)] = stub
    return bytes(page)


def segv_handler(low: int, high: int) -> bytes:
    """``handler(sig, info, ucontext)``: exit with CLOCK_EXIT when the fault address is in
    ``[low, high)`` (the removed clock pages) or the faulting instruction is rdtsc/rdtscp; else
    return (SA_RESETHAND has restored the default action: the instruction faults again, fatally)."""
    clock = _exit_stub(CLOCK_EXIT)
    check_rip = (b"\x48\x8b\x82\xa8\x00\x00\x00"  # mov rax, [rdx+168]   (uc_mcontext.rip)
                 b"\x0f\xb7\x08"  # movzx ecx, word [rax]
                 b"\x81\xf9\x0f\x31\x00\x00")  # cmp ecx, 0x310f       (rdtsc)
    rdtscp = (b"\x81\xf9\x0f\x01\x00\x00"  # cmp ecx, 0x010f
              + b"\x75" + bytes([4 + 2 + len(clock)])  # jne ret
              + b"\x80\x78\x02\xf9"  # cmp byte [rax+2], 0xf9 (rdtscp)
              + b"\x75" + bytes([len(clock)]))  # jne ret
    after_rip = b"\x74" + bytes([len(rdtscp)]) + rdtscp  # je clock; ...
    high_check = b"\x48\xb9" + struct.pack("<Q", high) + b"\x48\x39\xc8" + b"\x72" + bytes([len(check_rip) + len(after_rip)])
    code = (b"\x48\x8b\x46\x10"  # mov rax, [rsi+16]    (si_addr)
            + b"\x48\xb9" + struct.pack("<Q", low) + b"\x48\x39\xc8"  # mov rcx, low; cmp rax, rcx
            + b"\x72" + bytes([len(high_check)])  # jb: below the clock pages
            + high_check  # mov rcx, high; cmp rax, rcx; jb clock
            + check_rip + after_rip + clock + b"\xc3")
    return code


def _executable(code: bytes) -> int:
    size = -(-len(code) // PAGE) * PAGE
    addr = _libc.mmap(None, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap of the sandbox's clock page failed")
    ctypes.memmove(addr, code, len(code))
    if _libc.mprotect(addr, size, PROT_READ | PROT_EXEC) != 0:
        raise OSError(ctypes.get_errno(), "mprotect of the sandbox's clock page failed")
    return addr


class _SigAction(ctypes.Structure):  # glibc's struct sigaction (x86-64)
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]


_plan: dict = {}


def prepare(mappings: dict[str, list[tuple[int, int]]] | None) -> str:
    """In the fork server, once: build our vDSO page and install the SIGSEGV handler. Returns what
    ``Sandbox.report["clock"]`` says. ``mappings`` is ``special_mappings()`` (None: unreadable)."""
    if not supported():
        return f"not removed: {os.uname().machine} (rdtsc and vDSO removal is x86-64 only)"
    if not mappings or "[vdso]" not in mappings:
        return "not removed: the vDSO and vvar pages could not be located"
    (vdso, vdso_end), = mappings["[vdso]"]
    if vdso != _libc.getauxval(AT_SYSINFO_EHDR):
        return "not removed: /proc/self/maps and the auxiliary vector disagree on the vDSO"
    vvar = [r for name, ranges in mappings.items() if name.startswith("[vvar") for r in ranges]
    page = _executable(replacement_vdso(ctypes.string_at(vdso, vdso_end - vdso)))
    low = min([vdso, *(a for a, _ in vvar)])
    handler = _executable(segv_handler(low, vdso_end))
    action = _SigAction(handler=handler, flags=SA_SIGINFO | SA_RESETHAND)
    if _libc.sigaction(signal.SIGSEGV, ctypes.byref(action), None) != 0:
        raise OSError(ctypes.get_errno(), "sigaction(SIGSEGV) failed")
    _plan.update(vdso=vdso, size=vdso_end - vdso, page=page, vvar=vvar)
    return "removed in every child: rdtsc faults, vvar unmapped, the vDSO's clocks exit (monotonic frozen)"


def remove() -> None:
    """In the template (``template.py``), once, before any child: no clock from here on, for it and
    every process it forks. Raises OSError when a step fails."""
    if not _plan:
        return
    if _libc.prctl(PR_SET_TSC, PR_TSC_SIGSEGV, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_TSC) failed")
    moved = _libc.mremap(ctypes.c_void_p(_plan["page"]), ctypes.c_size_t(_plan["size"]),
                         ctypes.c_size_t(_plan["size"]), MREMAP_MAYMOVE | MREMAP_FIXED,
                         ctypes.c_void_p(_plan["vdso"]))
    if moved != _plan["vdso"]:
        raise OSError(ctypes.get_errno(), "mremap of the sandbox's vDSO failed")
    for start, end in _plan["vvar"]:
        if _libc.munmap(start, end - start) != 0:
            raise OSError(ctypes.get_errno(), "munmap of the vvar pages failed")
