//! The system calls a sandbox's processes may make: a seccomp profile forage
//! writes itself (handed to the engine as `seccomp=<profile>`, which replaces the
//! engine's default), so that it can refuse what the engine's default allows and
//! no agent should do.
//!
//! The rule that made forage need its own: a file the agent leaves in a
//! workspace must never be setuid or setgid on the host. The workspace is a
//! host directory; a setuid `sh` the agent (root in the container when forage
//! runs as root) leaves there runs as root for any local user who runs it. No
//! capability stops an owner from setting those bits on their own file, so the
//! calls that set a file's mode (`chmod`, `fchmod`, `fchmodat`, and those that
//! create a file with a mode: `open`, `openat`, `creat`, `mknod`, `mknodat`)
//! are allowed only when the mode has neither bit; the ones whose mode forage
//! cannot see (`openat2`, `fchmodat2`: in a struct, or new) answer ENOSYS, so
//! that the C library falls back to the others.
//!
//! Everything else follows what container engines refuse by default and an
//! unprivileged agent has no use for: namespaces (`unshare`, `setns`, `clone`
//! with a namespace flag; `clone3`, whose flags are in a struct, answers ENOSYS
//! so the C library uses `clone`), mounting, kernel modules, keyrings, BPF,
//! perf, io_uring, the clock, swap, reboot, and file handles. Calls newer than
//! the engine's seccomp library knows answer ENOSYS (the runtime's own rule).

use serde_json::{json, Value};

/// Every system call a sandbox may make without conditions: the x86-64, i386
/// and generic (arm64) tables, but the ones refused above and those allowed
/// only with conditions (`conditional_rules`). Names an architecture lacks, or
/// the engine's seccomp library does not know, are skipped by the engine.
const ALLOWED: &[&str] = &[
    "_llseek",
    "_newselect",
    "accept",
    "accept4",
    "access",
    "adjtimex",
    "alarm",
    "arch_prctl",
    "bind",
    "brk",
    "cachestat",
    "capget",
    "capset",
    "chdir",
    "chown",
    "chown32",
    "clock_getres",
    "clock_getres_time64",
    "clock_gettime",
    "clock_gettime64",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    "close",
    "close_range",
    "connect",
    "copy_file_range",
    "dup",
    "dup2",
    "dup3",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_ctl_old",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "epoll_wait_old",
    "eventfd",
    "eventfd2",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "faccessat",
    "faccessat2",
    "fadvise64",
    "fadvise64_64",
    "fallocate",
    "fanotify_mark",
    "fchdir",
    "fchown",
    "fchown32",
    "fchownat",
    "fcntl",
    "fcntl64",
    "fdatasync",
    "fgetxattr",
    "file_getattr",
    "file_setattr",
    "flistxattr",
    "flock",
    "fork",
    "fremovexattr",
    "fsetxattr",
    "fstat",
    "fstat64",
    "fstatat",
    "fstatat64",
    "fstatfs",
    "fstatfs64",
    "fsync",
    "ftruncate",
    "ftruncate64",
    "futex",
    "futex_requeue",
    "futex_time64",
    "futex_wait",
    "futex_waitv",
    "futex_wake",
    "futimesat",
    "get_robust_list",
    "get_thread_area",
    "getcpu",
    "getcwd",
    "getdents",
    "getdents64",
    "getegid",
    "getegid32",
    "geteuid",
    "geteuid32",
    "getgid",
    "getgid32",
    "getgroups",
    "getgroups32",
    "getitimer",
    "getpeername",
    "getpgid",
    "getpgrp",
    "getpid",
    "getppid",
    "getpriority",
    "getrandom",
    "getresgid",
    "getresgid32",
    "getresuid",
    "getresuid32",
    "getrlimit",
    "getrusage",
    "getsid",
    "getsockname",
    "getsockopt",
    "gettid",
    "gettimeofday",
    "getuid",
    "getuid32",
    "getxattr",
    "getxattrat",
    "inotify_add_watch",
    "inotify_init",
    "inotify_init1",
    "inotify_rm_watch",
    "io_cancel",
    "io_destroy",
    "io_getevents",
    "io_pgetevents",
    "io_pgetevents_time64",
    "io_setup",
    "io_submit",
    "ioctl",
    "ioprio_get",
    "ioprio_set",
    "ipc",
    "kill",
    "landlock_add_rule",
    "landlock_create_ruleset",
    "landlock_restrict_self",
    "lchown",
    "lchown32",
    "lgetxattr",
    "link",
    "linkat",
    "listen",
    "listmount",
    "listxattr",
    "listxattrat",
    "llistxattr",
    "llseek",
    "lremovexattr",
    "lseek",
    "lsetxattr",
    "lsm_get_self_attr",
    "lsm_list_modules",
    "lsm_set_self_attr",
    "lstat",
    "lstat64",
    "madvise",
    "map_shadow_stack",
    "membarrier",
    "memfd_create",
    "memfd_secret",
    "mincore",
    "mkdir",
    "mkdirat",
    "mlock",
    "mlock2",
    "mlockall",
    "mmap",
    "mmap2",
    "mprotect",
    "mq_getsetattr",
    "mq_notify",
    "mq_open",
    "mq_timedreceive",
    "mq_timedreceive_time64",
    "mq_timedsend",
    "mq_timedsend_time64",
    "mq_unlink",
    "mremap",
    "mseal",
    "msgctl",
    "msgget",
    "msgrcv",
    "msgsnd",
    "msync",
    "munlock",
    "munlockall",
    "munmap",
    "nanosleep",
    "newfstatat",
    "nice",
    "oldfstat",
    "oldlstat",
    "oldolduname",
    "oldstat",
    "olduname",
    "pause",
    "pidfd_getfd",
    "pidfd_open",
    "pidfd_send_signal",
    "pipe",
    "pipe2",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "poll",
    "ppoll",
    "ppoll_time64",
    "prctl",
    "pread64",
    "preadv",
    "preadv2",
    "prlimit64",
    "process_madvise",
    "process_mrelease",
    "process_vm_readv",
    "process_vm_writev",
    "pselect6",
    "pselect6_time64",
    "ptrace",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "read",
    "readahead",
    "readdir",
    "readlink",
    "readlinkat",
    "readv",
    "recvfrom",
    "recvmmsg",
    "recvmmsg_time64",
    "recvmsg",
    "remap_file_pages",
    "removexattr",
    "removexattrat",
    "rename",
    "renameat",
    "renameat2",
    "restart_syscall",
    "rmdir",
    "rseq",
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_getaffinity",
    "sched_getattr",
    "sched_getparam",
    "sched_getscheduler",
    "sched_rr_get_interval",
    "sched_rr_get_interval_time64",
    "sched_setaffinity",
    "sched_setattr",
    "sched_setparam",
    "sched_setscheduler",
    "sched_yield",
    "seccomp",
    "select",
    "semctl",
    "semget",
    "semop",
    "semtimedop",
    "semtimedop_time64",
    "sendfile",
    "sendfile64",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "set_robust_list",
    "set_thread_area",
    "set_tid_address",
    "setfsgid",
    "setfsgid32",
    "setfsuid",
    "setfsuid32",
    "setgid",
    "setgid32",
    "setgroups",
    "setgroups32",
    "setitimer",
    "setpgid",
    "setpriority",
    "setregid",
    "setregid32",
    "setresgid",
    "setresgid32",
    "setresuid",
    "setresuid32",
    "setreuid",
    "setreuid32",
    "setrlimit",
    "setsid",
    "setsockopt",
    "setuid",
    "setuid32",
    "setxattr",
    "setxattrat",
    "sgetmask",
    "shmat",
    "shmctl",
    "shmdt",
    "shmget",
    "shutdown",
    "sigaction",
    "sigaltstack",
    "signal",
    "signalfd",
    "signalfd4",
    "sigpending",
    "sigprocmask",
    "sigreturn",
    "sigsuspend",
    "socket",
    "socketcall",
    "socketpair",
    "splice",
    "ssetmask",
    "stat",
    "stat64",
    "statfs",
    "statfs64",
    "statmount",
    "statx",
    "symlink",
    "symlinkat",
    "sync",
    "sync_file_range",
    "sync_file_range2",
    "syncfs",
    "sysinfo",
    "tee",
    "tgkill",
    "time",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_gettime64",
    "timer_settime",
    "timer_settime64",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_gettime64",
    "timerfd_settime",
    "timerfd_settime64",
    "times",
    "tkill",
    "truncate",
    "truncate64",
    "ugetrlimit",
    "umask",
    "uname",
    "unlink",
    "unlinkat",
    "uretprobe",
    "utime",
    "utimensat",
    "utimensat_time64",
    "utimes",
    "vfork",
    "vmsplice",
    "wait4",
    "waitid",
    "waitpid",
    "write",
    "writev",
];

/// `S_ISUID | S_ISGID`.
const SET_ID_BITS: u64 = 0o6000;
/// `O_CREAT | __O_TMPFILE`: the flags with which `open` and `openat` use their mode.
const CREATING: u64 = 0o100 | 0o20_000_000;
/// Every `CLONE_NEW*` flag.
const NAMESPACES: u64 = 0x7E02_0000;
/// The `personality` values the engines allow: Linux, with and without
/// `UNAME26` and `PER_LINUX32`, and the query.
const PERSONALITIES: &[u64] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];
const ENOSYS: u64 = 38;
const EPERM: u64 = 1;

/// Allows `names` when argument `index` masked with `mask` is zero.
fn allow_when_clear(names: &[&str], index: u32, mask: u64) -> Value {
    json!({
        "names": names,
        "action": "SCMP_ACT_ALLOW",
        "args": [{"index": index, "value": mask, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
    })
}

/// The rules with conditions, each an allow: several for one call are alternatives.
fn conditional_rules() -> Vec<Value> {
    let mut rules = vec![
        allow_when_clear(&["chmod", "fchmod", "creat"], 1, SET_ID_BITS),
        allow_when_clear(&["fchmodat", "mknodat"], 2, SET_ID_BITS),
        allow_when_clear(&["mknod"], 1, SET_ID_BITS),
        // open(path, flags, mode) and openat(dir, path, flags, mode): the mode
        // only counts with a flag that creates.
        allow_when_clear(&["open"], 1, CREATING),
        allow_when_clear(&["open"], 2, SET_ID_BITS),
        allow_when_clear(&["openat"], 2, CREATING),
        allow_when_clear(&["openat"], 3, SET_ID_BITS),
        allow_when_clear(&["clone"], 0, NAMESPACES),
        json!({"names": ["clone3", "openat2", "fchmodat2"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS}),
    ];
    for value in PERSONALITIES {
        rules.push(json!({
            "names": ["personality"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": value, "valueTwo": 0, "op": "SCMP_CMP_EQ"}],
        }));
    }
    rules
}

/// The profile, as the engine's `seccomp=` security option takes it.
pub fn profile() -> String {
    let mut syscalls = vec![json!({"names": ALLOWED, "action": "SCMP_ACT_ALLOW"})];
    syscalls.extend(conditional_rules());
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        "archMap": [
            {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
        ],
        "syscalls": syscalls,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_sets_a_mode_or_makes_a_namespace_is_never_allowed_unconditionally() {
        for name in
            ["chmod", "fchmod", "fchmodat", "fchmodat2", "open", "openat", "openat2", "creat", "mknod", "mknodat"]
        {
            assert!(!ALLOWED.contains(&name), "{name} is allowed whatever its mode");
        }
        for name in ["unshare", "setns", "clone", "clone3", "mount", "keyctl", "bpf", "io_uring_setup", "personality"] {
            assert!(!ALLOWED.contains(&name), "{name}");
        }
        for name in ["read", "write", "execve", "fstat", "newfstatat", "statx", "getrandom", "rseq", "wait4", "ptrace"]
        {
            assert!(ALLOWED.contains(&name), "{name} is needed");
        }
        let mut sorted = ALLOWED.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ALLOWED.len(), "each name once");
        let profile: Value = serde_json::from_str(&profile()).unwrap();
        assert_eq!(profile["defaultAction"], "SCMP_ACT_ERRNO");
    }
}
