package sandbox

/*
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

// agentpool_unshared is 1 in the child agentpool_unshare forked.
static int agentpool_unshared;

static int agentpool_unshared_get(void) { return agentpool_unshared; }

static void agentpool_unshare_fail(const char *what) {
	fprintf(stderr, "agentpool sandbox-exec: %s: %s\n", what, strerror(errno));
	_exit(126);
}

static void agentpool_write(const char *path, const char *text) {
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		agentpool_unshare_fail(path);
	}
	size_t n = strlen(text);
	if (write(fd, text, n) != (ssize_t)n) {
		agentpool_unshare_fail(path);
	}
	close(fd);
}

// agentpool_unshare runs before the Go runtime starts, while the
// process has a single thread (unshare(2) of a user namespace requires
// it). When AGENTPOOL_UNSHARE is set (to the niceness of the program, 0
// for none), the launcher makes its namespaces itself, rather than the
// daemon's clone(2) making them: a clone with CLONE_NEWUSER cannot
// share the daemon's memory (no vfork), so it copies the daemon's whole
// address space first, which costs milliseconds per start; the daemon
// now starts the launcher with a plain vfork and this small process
// makes them. It unshares the user, mount, PID (its children's), IPC
// and network namespaces, maps its uid and gid to themselves (setgroups
// denied), and forks: the child, first to be born in the new PID
// namespace, goes on to the Go program (the launcher, which builds the
// view, applies the rules and starts the program as the namespace's
// init); the parent, which the daemon started and waits for, waits for
// it and ends as it does.
__attribute__((constructor)) static void agentpool_unshare(void) {
	const char *on = getenv("AGENTPOOL_UNSHARE");
	if (on == NULL || *on == 0) {
		return;
	}
	// Its value is the niceness the launcher gives the program, which
	// its first process shows too (ps, the pool's fairness).
	char *end;
	long nice = strtol(on, &end, 10);
	if (*end != 0 || nice < 0 || nice > 19) {
		errno = EINVAL;
		agentpool_unshare_fail("AGENTPOOL_UNSHARE is not a niceness");
	}
	if (nice > 0) {
		setpriority(PRIO_PROCESS, 0, (int)nice);
	}
	uid_t uid = getuid();
	gid_t gid = getgid();
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET) < 0) {
		agentpool_unshare_fail("new namespaces");
	}
	// Its /proc files are then its own user's to write, whatever the
	// binary's mode.
	prctl(PR_SET_DUMPABLE, 1);
	char map[64];
	agentpool_write("/proc/self/setgroups", "deny");
	snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
	agentpool_write("/proc/self/uid_map", map);
	snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
	agentpool_write("/proc/self/gid_map", map);
	pid_t child = fork();
	if (child < 0) {
		agentpool_unshare_fail("fork");
	}
	if (child == 0) {
		// This process ends with its parent: killed, the parent takes
		// the namespace with it.
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		agentpool_unshared = 1;
		return;
	}
	// The parent keeps nothing of what the namespaces gave it: no
	// capability, no-new-privs. The daemon signals the process group, the
	// child with it: the parent outlives the child and reports its end.
	// It holds none of the program's files, whose end the daemon waits
	// for: its stdout (and a terminal's) end when the program's last
	// holder closes them.
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3];
	memset(none, 0, sizeof none);
	syscall(SYS_capset, &hdr, none);
	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	static const int ignored[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
		SIGTSTP, SIGTTIN, SIGTTOU, SIGALRM, SIGPIPE};
	for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++) {
		signal(ignored[i], SIG_IGN);
	}
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
	}
	long closed = -1;
#ifdef SYS_close_range
	closed = syscall(SYS_close_range, 3, ~0U, 0);
#endif
	if (closed < 0) {
		for (int fd = 3; fd < 1024; fd++) {
			close(fd);
		}
	}
	int status;
	while (waitpid(child, &status, 0) < 0) {
		if (errno != EINTR) {
			_exit(126);
		}
	}
	if (WIFSIGNALED(status)) {
		// Ends by the same signal, as the launcher itself used to.
		int sig = WTERMSIG(status);
		signal(sig, SIG_DFL);
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, sig);
		sigprocmask(SIG_UNBLOCK, &set, NULL);
		prctl(PR_SET_DUMPABLE, 0); // no core file
		raise(sig);
		_exit(128 + sig);
	}
	_exit(WEXITSTATUS(status));
}
*/
import "C"

// unshared reports whether this process is the child the constructor
// forked in new namespaces, its ids mapped already (EnvUnshare). A
// launcher that was not (a binary without the constructor) must not
// build a view: its mounts would be the daemon's.
func unshared() bool {
	return C.agentpool_unshared_get() != 0
}
