"""The sandbox as the security boundary: what one program leaves behind never reaches the next.

Each test runs an attack and then honest programs on the SAME fork server (one lane, one replica),
the situation in which the old sandbox failed: a deep tree broke cleanup, System V objects and keys
outlived the program, other jobs of a chunk sat in the server's memory. No AST filter is involved.
"""

from __future__ import annotations

import os
import secrets
import subprocess

import pytest
from test_sandbox_hostile import isolation_mode, load_corpus

from populora.sandbox import Program, Sandbox, SandboxLimits
from populora.sandbox.results import MAX_DETAIL, is_sandbox_reason

HONEST = Program("def f(a):\n    return sorted(a)", calls=("[3, 1, 2]",))
LIMITS = SandboxLimits(wall_seconds=10.0, cpu_seconds=8, memory_mb=256)


def corpus_program(name: str) -> Program:
    for stem, program, _, _ in load_corpus():
        if stem == name:
            return program
    raise KeyError(name)


def needs_full():
    if isolation_mode() != "full":
        pytest.skip(f"needs full isolation (root with namespaces), not {isolation_mode()!r}")


def assert_honest_after(box: Sandbox, n: int = 30) -> None:
    outs = box.run_many([HONEST] * n)
    assert [o.values for o in outs] == [["[1, 2, 3]"]] * n, {o.reason for o in outs}


def ctypes_program(body: str) -> Program:
    return Program(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\ndef f(x):\n" + body, calls=("0",)
    )


# --- item 1: a deep tree and an inode flood ---------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["full", "uid"])
def test_deep_tree_then_honest_programs_and_a_clean_close(mode):
    if os.geteuid() != 0 or (mode == "full" and isolation_mode() != "full"):
        pytest.skip(f"{mode} isolation needs root (and namespaces for full)")
    attack = corpus_program("deep_tree_inode_flood")
    # uid mode has no inode limit (the work directory is on the host's file system): a short wall
    # limit keeps the flood, and its removal, small
    limits = LIMITS if mode == "full" else SandboxLimits(wall_seconds=2.0, cpu_seconds=2, memory_mb=256)
    box = Sandbox(limits=limits, workers=1, isolation=mode)
    try:
        out = box.run(attack)
        assert out.reason == "runtime_error:OSError" or out.status == "timeout", out
        # the next program finds nothing at the attack's path (a child cannot list or stat: it makes
        # the directory the attack made, which fails if it is still there)
        probe = box.run(Program("import os\ndef f(x):\n    os.mkdir('d')\n    return 1", calls=("0",)))
        assert probe.values == ["1"], probe
        assert_honest_after(box)
        scratch = box.scratch
        assert [p.name for p in scratch.iterdir() if not p.name.endswith(".log")] == []
    finally:
        box.close()  # never raises (it did: RecursionError from a recursive rmtree)
    assert not scratch.exists()


# --- item 2: System V IPC ---------------------------------------------------------------------
MSGQUEUE_BOMB = """
    qid = libc.msgget(0x5EED, 0)          # what an earlier program left under the key, if anything
    found = (qid, ctypes.get_errno())
    mine = libc.msgget(0x5EED, 0o1000 | 0o666)
    if mine >= 0:
        libc.msgsnd(mine, ctypes.create_string_buffer(b"\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00bomb"), 4, 0)
    return found
"""
SHM_HOARD = """
    ids = []
    for key in range(0x5EE0, 0x5EE4):    # 4 x 64 MiB touched, detached, left behind (memory_mb=128)
        shmid = libc.shmget(key, 64 << 20, 0o1000 | 0o600)
        if shmid < 0:
            return ('denied', ctypes.get_errno())
        libc.shmat.restype = ctypes.c_void_p
        addr = libc.shmat(shmid, None, 0)
        ctypes.memset(addr, 1, 64 << 20)
        libc.shmdt(ctypes.c_void_p(addr))
        ids.append(shmid)
    return ('held', len(ids))
"""
SHM_LEFT = """
    left = [libc.shmget(key, 0, 0) for key in range(0x5EE0, 0x5EE4)]
    return [(shmid, ctypes.get_errno()) for shmid in left][-1:] + [sum(s >= 0 for s in left)]
"""


@pytest.mark.slow
@pytest.mark.parametrize("without", [(), ("seccomp",)], ids=["seccomp", "ipc-namespace-alone"])
def test_sysv_ipc_dies_with_each_program(without):
    """With the filter the calls are refused; without it the per-program IPC namespace still holds."""
    needs_full()
    limits = SandboxLimits(wall_seconds=10.0, cpu_seconds=8, memory_mb=128)
    with Sandbox(limits=limits, workers=1, without=without) as box:
        first, second = box.run_many([ctypes_program(MSGQUEUE_BOMB), ctypes_program(MSGQUEUE_BOMB)])
        assert first.ok and second.ok, (first, second)
        # same answer on a fresh and on a used server: the time bomb finds nothing
        assert first.values == second.values
        errno_seen = eval(second.values[0])[1]
        assert errno_seen == (1 if not without else 2)  # EPERM (filter) or ENOENT (fresh namespace)
        hoard = box.run(ctypes_program(SHM_HOARD))
        assert hoard.ok, hoard
        if without:
            assert eval(hoard.values[0]) == ("held", 4)  # 256 MiB over a 128 MiB limit, while it ran
            after = box.run(ctypes_program(SHM_LEFT))
            assert after.values == ["[(-1, 2), 0]"]  # ENOENT: gone with the program's namespace
        else:
            assert eval(hoard.values[0]) == ("denied", 1)
        assert_honest_after(box)


# --- item 3: keyrings -------------------------------------------------------------------------
ADD_KEY = """
    libc.syscall.restype = ctypes.c_long
    made = libc.syscall(ctypes.c_long(248), b"user", b"populora_pwned", b"x", ctypes.c_long(1), ctypes.c_long(-4))
    made_errno = ctypes.get_errno()
    found = libc.syscall(ctypes.c_long(250), ctypes.c_long(10), ctypes.c_long(-4), b"user", b"populora_pwned", ctypes.c_long(0))
    return [(made, made_errno), (found, ctypes.get_errno())]
"""


@pytest.mark.slow
def test_keyrings_are_out_of_reach():
    needs_full()
    with Sandbox(limits=LIMITS, workers=1) as box:
        if box.report.get("seccomp") != "loaded in every child":
            pytest.skip(f"keyrings are closed by the seccomp filter only: {box.report.get('seccomp')}")
        first, second = box.run_many([ctypes_program(ADD_KEY)] * 2)
        assert first.values == second.values == ["[(-1, 1), (-1, 1)]"]
        assert_honest_after(box)
    keys = subprocess.run(["cat", "/proc/keys"], capture_output=True, text=True).stdout
    assert "populora_pwned" not in keys


# --- item 4: address families -----------------------------------------------------------------
def test_no_sockets():
    """No address family at all: AF_VSOCK reached the host's port space (issue 13), and AF_UNIX
    buffers and descriptors in flight held kernel memory far beyond memory_mb (issue 22)."""
    needs_full()
    with Sandbox(limits=LIMITS, workers=1) as box:
        if box.report.get("seccomp") != "loaded in every child":
            pytest.skip(f"address families are closed by the seccomp filter: {box.report.get('seccomp')}")
        out = box.run(corpus_program("socket_families"))
        assert out.ok and "('AF_VSOCK', 1)" in out.values[0] and "('AF_UNIX', 1)" in out.values[0], out
        assert_honest_after(box, 5)


# --- item 5: other jobs' programs and inputs ----------------------------------------------------
SCAN = """
import ctypes, re, sys
OWN = 'OWNMARK' + '{own}'
def f(x):
    needle = ('VICTIM' + 'SECRET').encode()
    own_needle = ('OWN' + 'MARK').encode()
    found, own_found = set(), set()
    with open('/proc/self/maps') as maps:   # every anonymous, heap and stack page of the child
        regions = [line.split() for line in maps]
    for fields in regions:
        if 'r' not in fields[1] or (len(fields) > 5 and fields[5] not in ('[heap]', '[stack]')):
            continue
        lo, hi = (int(v, 16) for v in fields[0].split('-'))
        data = ctypes.string_at(lo, hi - lo)
        for pattern, out in ((needle, found), (own_needle, own_found)):
            for m in re.finditer(re.escape(pattern) + rb'([0-9a-f]{{32}})', data):
                out.add(m.group(1).decode())
        del data
    frame = sys._getframe()
    while frame is not None:             # and everything the frames up to the server hold
        for value in frame.f_locals.values():
            for m in re.finditer('VICTIMSECRET([0-9a-f]{{32}})', repr(value)[:10**6]):
                found.add(m.group(1))
        frame = frame.f_back
    return [sorted(found), sorted(own_found)]
"""


@pytest.mark.slow
@pytest.mark.parametrize("victim_first", [False, True], ids=["victim-later-in-chunk", "victim-earlier"])
def test_no_other_job_in_a_childs_memory(victim_first):
    needs_full()
    own, secret = secrets.token_hex(16), secrets.token_hex(16)
    victim = Program(
        f"# VICTIMSECRET{secret}\ndef f(s):\n    return len(s)", calls=(f"'VICTIMSECRET{secret}'",)
    )
    attacker = Program(SCAN.format(own=own), calls=("0",))
    pair = [victim, attacker] if victim_first else [attacker, victim]
    # the scan reads /proc/self/maps: /proc is mounted for it (programs see an empty /proc otherwise)
    with Sandbox(limits=LIMITS, workers=1, without=("hidden_proc",)) as box:
        outs = box.run_many(pair + [HONEST] * 30)  # >= 8 programs: the pair shares one chunk
        scan = outs[pair.index(attacker)]
        assert scan.ok, scan
        found, own_found = eval(scan.values[0])
        assert own in own_found  # the scan works: it finds the attacker's own program text
        assert secret not in found
        assert all(o.ok for o in outs), {o.reason for o in outs}


# --- item 6: reasons and details ----------------------------------------------------------------
def test_reasons_are_a_fixed_grammar_and_details_are_bounded():
    needs_full()
    with Sandbox(limits=LIMITS, workers=1) as box:
        forged, noisy = box.run_many(
            [corpus_program("forge_unbounded_reason"), corpus_program("control_chars_in_detail")]
        )
    assert forged.reason == "crashed:bad_result" and len(forged.detail) <= MAX_DETAIL
    assert noisy.reason == "runtime_error:ValueError"
    assert len(noisy.detail) <= MAX_DETAIL and noisy.detail.isprintable() and "\x1b" not in noisy.detail
    assert all(is_sandbox_reason(o.reason) for o in (forged, noisy))


# --- a server that cannot repair itself is replaced ---------------------------------------------
def test_retiring_server_is_replaced(monkeypatch):
    from populora.sandbox import executor

    receive = executor._Server.receive
    calls = {"n": 0}

    def damaged_once(self, job, timeout):
        answer, res, out = receive(self, job, timeout)
        calls["n"] += 1
        if calls["n"] == 2:  # as a server does when its scratch cannot be removed
            answer["retire"] = "the work directory could not be removed"
        return answer, res, out

    monkeypatch.setattr(executor._Server, "receive", damaged_once)
    with Sandbox(limits=LIMITS, workers=1) as box:
        before = set(box.server_pids())
        outs = box.run_many([HONEST] * 12)
        assert all(o.ok for o in outs), {o.reason for o in outs}
        assert not before & set(box.server_pids())  # the first server was closed and replaced


# --- issue 22, item 4: nothing of the previous job in the fork server; oversized results -------
PREVIOUS_JOB_SCAN = """
import sys
def f(x):
    seen, frame = [], sys._getframe().f_back
    while frame is not None:
        if not frame.f_code.co_filename.endswith('server.py'):
            frame = frame.f_back
            continue
        for name, value in list(frame.f_locals.items()):
            seen.append(name)
            seen.append(repr(value)[:2000])
            if name == 'server':
                seen.append(repr(vars(value))[:20000])
                for cap in (value.res, value.out):
                    seen.append(repr({k: v for k, v in vars(cap).items() if k != 'buf'}))
        frame = frame.f_back
    return ' '.join(seen)
"""


@pytest.mark.slow
def test_no_value_of_the_previous_job_in_the_fork_server():
    needs_full()
    size = 7919  # a prime no other number in the server should happen to be
    previous = Program(f"def f(x):\n    print('x' * {size - 1})\n    return 'y' * 991", calls=("0",))
    limits = SandboxLimits(wall_seconds=10.0, cpu_seconds=8, memory_mb=512, max_output_chars=200_000)
    with Sandbox(limits=limits, workers=1) as box:
        first, scan = box.run_many([previous, Program(PREVIOUS_JOB_SCAN, calls=("0",))])
    assert first.ok and len(first.stdout) == size, first
    assert scan.ok, scan
    text = eval(scan.values[0])
    assert "server" in text  # the walk reached the fork server's frames
    for leak in (str(size), "'cpu'", "'res_overflow'", "'res_too_large'", "'exit'"):
        assert leak not in text, leak
    assert "'size': 0" in text and "'cap': 0" in text  # the capture buffers were wiped


FINGERPRINT = """import gc, sys
def f(x):
    frames, frame = [], sys._getframe(1)  # the frames above the program, the template's among them
    while frame is not None:
        frames.append((frame.f_code.co_name, sorted((k, repr(v)) for k, v in frame.f_locals.items())))
        frame = frame.f_back
    return [id(object()), repr(object()), id([]), id({}), id(1.5 + x), gc.get_count(), gc.get_stats(),
            sys.getallocatedblocks(), len(gc.get_objects()), hash(repr(frames)), sys.orig_argv]
"""


def test_a_childs_memory_does_not_depend_on_what_ran_before():
    """issue 37: children are forked from a template that never saw a job, so addresses, gc's
    counters, the frames above the program and everything in them are the same for the same
    program and seed whatever ran before it, on any server of that seed."""
    needs_full()
    probe = Program(FINGERPRINT, calls=("0",))
    before = [
        Program("def f(x):\n    print('y' * 9000)\n    return ['x'] * 500", calls=("0",)),
        Program("def f(x):\n    return {i: [i] * 50 for i in range(x)}", calls=tuple(str(i) for i in range(40))),
        Program("def f(x):\n    raise ValueError(x)", calls=("1",)),
        Program("import os\ndef f(x):\n    os._exit(3)", calls=("0",)),
    ]
    with Sandbox(limits=LIMITS, workers=2, hash_seed=11) as box:
        outs = box.run_many([probe, *before, probe, *before[::-1], *before, probe])
        again = box.run_many([*before, probe])  # another batch, maybe on the other lane's server
    with Sandbox(limits=LIMITS, workers=1, hash_seed=11) as other:  # another sandbox, the same seed
        elsewhere = other.run(probe)
    with Sandbox(limits=LIMITS, workers=1, hash_seed=12) as reseeded:
        reseeded_out = reseeded.run(probe)
    prints = [o.values for o in (outs[0], outs[5], outs[-1], again[-1], elsewhere)]
    assert all(o.ok for o in (outs[0], outs[5], outs[-1], again[-1], elsewhere)), prints
    assert all(p == prints[0] for p in prints), prints
    assert reseeded_out.values != prints[0]  # the layout is drawn from the seed


@pytest.mark.slow
def test_a_result_too_large_for_one_answer_is_output_too_large():
    needs_full()
    from populora.sandbox.server import MAX_RESULT_BYTES

    limits = SandboxLimits(wall_seconds=20.0, cpu_seconds=15, memory_mb=2048, max_output_chars=30_000_000)
    chars = MAX_RESULT_BYTES // 4 + 1000  # two values of 2 UTF-8 bytes a character: over the cap
    big = Program(f"def f(x):\n    return '\\u00e9' * {chars}", calls=("0", "1"))
    with Sandbox(limits=limits, workers=1) as box:
        out = box.run(big)
        assert (out.status, out.reason) == ("output_too_large", "output_too_large"), out
        assert_honest_after(box, 3)


# --- issue 22, item 2: nothing a program holds reaches the host or the other replica -----------
HOST_REACH = """
    d = os.path.dirname(os.__file__)
    fd = os.open(d + '/os.py', os.O_RDONLY)
    out = {}
    def t(name, fn):
        try:
            fn()
            out[name] = 'allowed'
        except OSError as e:
            out[name] = e.errno
    import fcntl
    t('flock', lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB))
    t('posix_lock', lambda: fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB))
    t('lease', lambda: fcntl.fcntl(fd, 1024, 0))
    t('dnotify', lambda: fcntl.fcntl(os.open(d, os.O_RDONLY), 1026, 1))
    t('pipe_size', lambda: fcntl.fcntl(os.pipe()[1], 1031, 1 << 20))
    ctx = ctypes.c_ulong(0)
    out['io_setup'] = (libc.syscall(206, 1, ctypes.byref(ctx)), ctypes.get_errno())
    out['inotify'] = (libc.inotify_init1(0), ctypes.get_errno())
    import resource
    out['sigpending'] = resource.getrlimit(resource.RLIMIT_SIGPENDING)[0]
    return out
"""


@pytest.mark.slow
def test_locks_watches_and_aio_are_refused():
    needs_full()
    with Sandbox(limits=LIMITS, workers=1) as box:
        out = box.run(ctypes_program(HOST_REACH))
        assert out.ok, out
        got = eval(out.values[0])
        assert got == {
            "flock": 1, "posix_lock": 1, "lease": 1, "dnotify": 1, "pipe_size": 1,
            "io_setup": (-1, 1), "inotify": (-1, 1), "sigpending": 16,
        }  # fmt: skip
        assert_honest_after(box, 5)


@pytest.mark.slow
@pytest.mark.parametrize("without", [(), ("seccomp",)], ids=["seccomp", "turns-alone"])
def test_replicas_cannot_agree_on_a_random_value(monkeypatch, without):
    """Two copies of a program that agree through locks on runtime inodes: with the filter the locks
    are refused; without it, replica 1 runs after replica 0 has finished and finds no partner."""
    needs_full()
    from populora.tasks import programs, validation
    from populora.tasks.config import TaskEnv
    from populora.tasks.records import Proposal

    monkeypatch.setattr(programs, "check_program", lambda *a, **k: None)  # the sandbox alone
    program = corpus_program("replicas_flock_agree").source
    proposals = [Proposal(type="code_o", program=program, inputs=("0",)) for _ in range(2)]
    with Sandbox(limits=LIMITS, workers=2, without=without) as box:
        verdicts = validation.validate_many(proposals, box, TaskEnv())
        assert [v.valid for v in verdicts] == [False, False], verdicts
        expected = "runtime_error:PermissionError" if not without else "nondeterministic"
        assert {v.reason for v in verdicts} == {expected}
        assert_honest_after(box, 5)


# --- issue 32, item 6: what one program leaves in the kernel is not the next one's ----------------
INFLIGHT_GARBAGE = """
import array, os, socket
def f(x):
    sent, error = 0, 0
    try:
        for _ in range(200):   # each pair sends both its ends over itself, then closes them: garbage
            a, b = socket.socketpair()
            fds = array.array('i', [a.fileno(), b.fileno()])
            a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            sent += 2
            a.close()
            b.close()
    except OSError as e:
        error = e.errno
    return [os.getuid(), sent, error]
"""
SEND_ONE = """
import array, os, socket
def f(x):
    a, b = socket.socketpair()
    try:
        a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [a.fileno()]))])
        return [os.getuid(), 0]
    except OSError as e:
        return [os.getuid(), e.errno]
"""


@pytest.mark.slow
def test_descriptors_in_flight_left_by_one_program_are_not_the_next_ones():
    """Without the filter (which refuses sockets), a program fills its user's count of descriptors
    in flight with unix-socket garbage; the next program on the same fork server runs as another
    uid, so its own descriptors still go through (the kernel counts in-flight ones per user)."""
    needs_full()
    with Sandbox(limits=LIMITS, workers=1, without=("seccomp",)) as box:
        garbage, probe = box.run_many([Program(INFLIGHT_GARBAGE, calls=("0",)), Program(SEND_ONE, calls=("0",))])
        uid_a, sent, error = eval(garbage.values[0])
        uid_b, probe_error = eval(probe.values[0])
        assert sent >= 64 and error == 109, garbage.values  # ETOOMANYREFS: the user's count is full
        assert uid_b != uid_a and probe_error == 0, (uid_a, uid_b, probe_error)
        assert_honest_after(box, 5)
    with Sandbox(limits=LIMITS, workers=1) as box:  # with the filter there is no socket at all
        out = box.run(Program(INFLIGHT_GARBAGE, calls=("0",)))
        assert eval(out.values[0])[1:] == [0, 1], out
