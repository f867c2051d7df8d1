-- forkprof recording schema, version 8 (see docs/recording.md).
-- A process is (pid, start_ns): start_ns is when it was created (CLOCK_MONOTONIC ns), and
-- minus that for a process first seen mid-life, whose creation was not traced (0 for the one
-- forkprof was asked to trace: run's CMD, record -p's process).
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- One row per fork-family syscall of a traced process (threads included, method 'thread').
CREATE TABLE spawns (
    pid INTEGER NOT NULL, start_ns INTEGER NOT NULL, ts_ns INTEGER NOT NULL,
    parent_pid INTEGER NOT NULL, parent_start_ns INTEGER NOT NULL,
    parent_tid INTEGER NOT NULL, child_tid INTEGER NOT NULL,
    method TEXT NOT NULL, syscall INTEGER NOT NULL, clone_flags INTEGER NOT NULL,
    errno INTEGER NOT NULL, syscall_start_ns INTEGER NOT NULL,
    fork_ns INTEGER NOT NULL, pagetable_copy_ns INTEGER NOT NULL,
    vfork_wait_ns INTEGER NOT NULL, parent_comm TEXT NOT NULL,
    cgroup_id INTEGER NOT NULL DEFAULT 0);
-- One row per exec attempt, failed ones included.
CREATE TABLE execs (
    pid INTEGER NOT NULL, start_ns INTEGER NOT NULL, ts_ns INTEGER NOT NULL,
    tid INTEGER NOT NULL, path TEXT NOT NULL, args TEXT, argc INTEGER NOT NULL,
    errno INTEGER NOT NULL, exec_ns INTEGER NOT NULL, exec_prepare_ns INTEGER NOT NULL,
    exec_load_ns INTEGER NOT NULL, atime_count INTEGER NOT NULL, atime_ns INTEGER NOT NULL,
    cow_faults INTEGER NOT NULL, child_run_ns INTEGER NOT NULL, cow_fault_ns INTEGER NOT NULL,
    cgroup_id INTEGER NOT NULL DEFAULT 0);
-- One row per dynamic-linker window after a successful exec.
CREATE TABLE lds (
    pid INTEGER NOT NULL, start_ns INTEGER NOT NULL, ts_ns INTEGER NOT NULL,
    outcome TEXT NOT NULL, openat_count INTEGER NOT NULL, syscalls INTEGER NOT NULL,
    ld_start_ns INTEGER NOT NULL, ld_map_ns INTEGER NOT NULL, ld_reloc_init_ns INTEGER NOT NULL,
    atime_count INTEGER NOT NULL, atime_ns INTEGER NOT NULL, static_start_ns INTEGER NOT NULL,
    objects INTEGER NOT NULL DEFAULT 0);
CREATE TABLE exits (
    pid INTEGER NOT NULL, start_ns INTEGER NOT NULL, ts_ns INTEGER NOT NULL,
    exit_code INTEGER NOT NULL, notified INTEGER NOT NULL, exit_teardown_ns INTEGER NOT NULL,
    cow_faults INTEGER NOT NULL, exit_ns INTEGER NOT NULL, comm TEXT NOT NULL,
    child_run_ns INTEGER NOT NULL, cow_fault_ns INTEGER NOT NULL,
    cgroup_id INTEGER NOT NULL DEFAULT 0);
-- Processes first seen mid-life (their rows above have start_ns 0 or below): those that
-- existed before tracing began, as /proc showed them then, and under --cgroup those that
-- came into the scope later, as /proc showed them when the scope's hooks attached or when
-- they first appeared. Written when one first appears in a record: the binary
-- (/proc/PID/exe, else [comm]) and its parent's (NULL when unknown).
CREATE TABLE found (
    pid INTEGER NOT NULL, start_ns INTEGER NOT NULL, binary TEXT NOT NULL,
    parent_binary TEXT, PRIMARY KEY (pid, start_ns));
-- The cgroup v2 ids above (spawns.cgroup_id, execs.cgroup_id, exits.cgroup_id) and their
-- paths under the cgroup2 mount, written when an id is first seen (a cgroup removed later
-- keeps its path).
CREATE TABLE cgroups (id INTEGER PRIMARY KEY, path TEXT NOT NULL);
-- Written when the recording ends: one row per process, and its phases.
CREATE TABLE processes (
    pid INTEGER NOT NULL, start_ns INTEGER NOT NULL, parent_pid INTEGER,
    method TEXT NOT NULL, binary TEXT NOT NULL, parent_binary TEXT NOT NULL,
    exit_code INTEGER, exit_signal INTEGER, PRIMARY KEY (pid, start_ns));
CREATE TABLE phases (
    pid INTEGER NOT NULL, start_ns INTEGER NOT NULL, phase TEXT NOT NULL, value INTEGER NOT NULL);
