#!/usr/bin/env python3
"""Attaches a BPF program that only returns 0 to syscall hooks, then runs a command and
exits with its status: the bare cost of a kind of hook, with no forkprof code in it
(bench/syscall-tax.sh). Needs root.

  hook-floor.py raw CMD...       raw tracepoints sys_enter and sys_exit: every syscall of
                                 every task runs both programs (forkprof's source where
                                 fentry is refused)
  hook-floor.py classic CMD...   the classic tracepoints syscalls:sys_enter_NAME for the
                                 syscalls forkprof follows on entry, and sys_exit_NAME for
                                 the fork and exec families: the kernel tests each
                                 syscall's number against a bitmap and runs a program only
                                 for those. These events skip every ia32 syscall, so
                                 forkprof cannot use them (docs/kernel-findings.md)
"""
import ctypes
import os
import struct
import subprocess
import sys

SYS_BPF, SYS_PERF_EVENT_OPEN = 321, 298
BPF_PROG_LOAD, BPF_RAW_TRACEPOINT_OPEN = 5, 17
PROG_TRACEPOINT, PROG_RAW_TRACEPOINT = 5, 17
PERF_TYPE_TRACEPOINT, PERF_SAMPLE_RAW = 2, 0x400
PERF_EVENT_IOC_SET_BPF, PERF_EVENT_IOC_ENABLE = 0x40042408, 0x2400
ENTERS = ["clone", "clone3", "fork", "vfork", "execve", "execveat", "exit_group",
          "access", "openat", "arch_prctl", "munmap", "mprotect"]
EXITS = ["clone", "clone3", "fork", "vfork", "execve", "execveat"]
TRACEFS = "/sys/kernel/tracing"

libc = ctypes.CDLL(None, use_errno=True)
# r0 = 0; exit
INSNS = ctypes.create_string_buffer(bytes.fromhex("b700000000000000" "9500000000000000"))
LICENSE = ctypes.create_string_buffer(b"GPL")


def check(ret, what):
    if ret < 0:
        err = ctypes.get_errno()
        sys.exit(f"hook-floor: {what}: {os.strerror(err)}")
    return ret


def bpf(cmd, attr, what):
    return check(libc.syscall(SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr)), what)


def load(prog_type):
    attr = (ctypes.c_uint8 * 128)()
    struct.pack_into("IIQQ", attr, 0, prog_type, 2, ctypes.addressof(INSNS),
                     ctypes.addressof(LICENSE))
    return bpf(BPF_PROG_LOAD, attr, "load")


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("raw", "classic"):
        sys.exit(__doc__)
    mode, cmd = sys.argv[1], sys.argv[2:]
    held = []
    if mode == "raw":
        for tp in ("sys_enter", "sys_exit"):
            name = ctypes.create_string_buffer(tp.encode())
            attr = (ctypes.c_uint8 * 16)()
            struct.pack_into("QI", attr, 0, ctypes.addressof(name), load(PROG_RAW_TRACEPOINT))
            held.append(bpf(BPF_RAW_TRACEPOINT_OPEN, attr, f"attach {tp}"))
    else:
        if not os.path.exists(f"{TRACEFS}/events"):
            sys.exit(f"hook-floor: mount tracefs first: mount -t tracefs nodev {TRACEFS}")
        events = [f"sys_enter_{n}" for n in ENTERS] + [f"sys_exit_{n}" for n in EXITS]
        for event in events:
            path = f"{TRACEFS}/events/syscalls/{event}/id"
            if not os.path.exists(path):
                if event.endswith(("_fork", "_vfork")):
                    continue  # on a kernel without them
                sys.exit(f"hook-floor: no {path} (a kernel without syscall trace events?)")
            attr = (ctypes.c_uint8 * 128)()
            struct.pack_into("IIQQQ", attr, 0, PERF_TYPE_TRACEPOINT, 128,
                             int(open(path).read()), 1, PERF_SAMPLE_RAW)
            # One event (cpu 0) carries the program for every CPU.
            fd = check(libc.syscall(SYS_PERF_EVENT_OPEN, ctypes.byref(attr), -1, 0, -1, 8),
                       f"perf_event_open {event}")
            check(libc.ioctl(fd, PERF_EVENT_IOC_SET_BPF, load(PROG_TRACEPOINT)), f"attach {event}")
            check(libc.ioctl(fd, PERF_EVENT_IOC_ENABLE, 0), f"enable {event}")
            held.append(fd)
    sys.exit(subprocess.call(cmd))


main()
