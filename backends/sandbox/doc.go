// Package sandbox confines agent processes with the kernel: each agent,
// and each terminal the ACP bridge starts for it, runs in a cgroup v2 of its
// own (started directly inside it with clone3's CLONE_INTO_CGROUP, stopped
// with cgroup.kill, removed afterwards), and under Landlock rules applied by
// a launcher — the agentpool binary re-executed — that sets no-new-privs and
// execs the program, so the rules cover it and every descendant.
//
// Where no cgroup can be created, the daemon becomes the child subreaper of
// its descendants and marks every confined process tree with an environment
// variable, so that a sweep can find and end what escaped its process group;
// that fallback is best effort and says so. Where the kernel has no Landlock,
// programs run without filesystem rules, and say so too, unless the policy
// requires them.
//
// A Manager owns one daemon's cgroup tree. Open finds a writable place for
// it (a configured parent, the daemon's own cgroup, or a delegated ancestor),
// Sweep ends whatever a previous daemon left in it, and NewJail makes the
// Jail one process starts in.
package sandbox
