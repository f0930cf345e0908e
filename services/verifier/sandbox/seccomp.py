"""A seccomp filter for the sandbox (x86-64): refuse the system calls a program only needs to attack the kernel.

bubblewrap installs it (``--seccomp FD``) before starting the supervisor, so it binds every process in the sandbox.
Refused with EPERM: new namespaces (``unshare``, ``setns``, namespace flags on ``clone``), mounting, ``ptrace`` and
cross-process memory access, kernel keyrings, BPF, perf events, userfaultfd, io_uring, module and kexec loading,
clock and swap changes. ``clone3`` answers ENOSYS, its flags live in memory a filter cannot read, and libc then falls
back to ``clone``, whose flags it can. Other architectures get no filter (the layer is reported missing).
"""

from __future__ import annotations

import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38
LD_ABS_W, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
OFF_NR, OFF_ARCH, OFF_ARG0 = 0, 4, 16
CLONE = 56
CLONE3 = 435
NAMESPACE_FLAGS = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
DENIED = {
    "ptrace": 101,
    "syslog": 103,
    "personality": 135,
    "pivot_root": 155,
    "adjtimex": 159,
    "chroot": 161,
    "acct": 163,
    "settimeofday": 164,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "iopl": 172,
    "ioperm": 173,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "clock_settime": 227,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "unshare": 272,
    "perf_event_open": 298,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "clock_adjtime": 305,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program() -> bytes:
    """The filter as raw ``struct sock_filter`` entries; jumps are forward offsets counted in instructions."""
    denied = sorted(DENIED.values())
    # Layout: [arch check] [nr load] [x32 check] [one JEQ per denied call] [clone] [clone3] [allow] [deny] ...
    body: list[bytes] = []
    n_deny = len(denied)
    # indices: 0 ld arch, 1 jeq arch, 2 ld nr, 3 jge x32, 4.. denied, then clone(3 insns), clone3(2), allow, deny, nosys
    first = 4
    clone_at = first + n_deny
    allow_at = clone_at + 5
    deny_at = allow_at + 1
    nosys_at = deny_at + 1
    body.append(_insn(LD_ABS_W, OFF_ARCH))
    body.append(_insn(JEQ, AUDIT_ARCH_X86_64, jt=0, jf=deny_at - 2))
    body.append(_insn(LD_ABS_W, OFF_NR))
    body.append(_insn(JGE, X32_SYSCALL_BIT, jt=deny_at - 4, jf=0))
    for i, nr in enumerate(denied):
        here = first + i
        body.append(_insn(JEQ, nr, jt=deny_at - here - 1, jf=0))
    # clone: load flags (low 32 bits of arg0) only when nr == clone
    body.append(_insn(JEQ, CLONE, jt=0, jf=2))  # clone_at
    body.append(_insn(LD_ABS_W, OFF_ARG0))  # clone_at + 1
    body.append(
        _insn(JSET, NAMESPACE_FLAGS, jt=deny_at - (clone_at + 2) - 1, jf=allow_at - (clone_at + 2) - 1)
    )
    body.append(_insn(JEQ, CLONE3, jt=nosys_at - (clone_at + 3) - 1, jf=0))  # clone_at + 3
    body.append(_insn(RET, RET_ALLOW))  # clone_at + 4 (falls through to allow as well)
    body.append(_insn(RET, RET_ALLOW))  # allow_at
    body.append(_insn(RET, RET_ERRNO | EPERM))  # deny_at
    body.append(_insn(RET, RET_ERRNO | ENOSYS))  # nosys_at
    return b"".join(body)
