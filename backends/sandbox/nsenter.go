package sandbox

/*
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

// agentpool_nsenter runs before the Go runtime starts, while the process
// has a single thread (setns(2) into a user or mount namespace requires
// it). When AGENTPOOL_NSENTER holds a pid, the process joins that
// process's user, IPC, network and mount namespaces and the PID namespace
// of its children (those of an agent's launcher, whose first process
// stays in the daemon's PID namespace: see unshare.go), returns to the directory it was started in, and
// forks: the child, first to be born in the PID namespace, goes on to the
// Go program (the launcher, which applies the rules and execs the
// terminal's command); the parent waits for it and exits as it does.
__attribute__((constructor)) static void agentpool_nsenter(void) {
	const char *pid = getenv("AGENTPOOL_NSENTER");
	if (pid == NULL || *pid == 0) {
		return;
	}
	static const struct { const char *name; int type; } nss[] = {
		{"user", CLONE_NEWUSER}, {"ipc", CLONE_NEWIPC}, {"net", CLONE_NEWNET},
		{"pid_for_children", CLONE_NEWPID}, {"mnt", CLONE_NEWNS},
	};
	enum { N = sizeof(nss) / sizeof(nss[0]) };
	int fds[N];
	char path[64], cwd[PATH_MAX];
	if (getcwd(cwd, sizeof cwd) == NULL) {
		strcpy(cwd, "/");
	}
	for (int i = 0; i < N; i++) {
		snprintf(path, sizeof path, "/proc/%s/ns/%s", pid, nss[i].name);
		fds[i] = open(path, O_RDONLY | O_CLOEXEC);
		if (fds[i] < 0) {
			fprintf(stderr, "agentpool sandbox-exec: join the agent's namespaces: open %s: %s\n", path, strerror(errno));
			_exit(126);
		}
	}
	for (int i = 0; i < N; i++) {
		if (setns(fds[i], nss[i].type) < 0) {
			fprintf(stderr, "agentpool sandbox-exec: join the agent's %s namespace: %s\n", nss[i].name, strerror(errno));
			_exit(126);
		}
		close(fds[i]);
	}
	if (chdir(cwd) < 0) {
		fprintf(stderr, "agentpool sandbox-exec: the agent's view has no %s\n", cwd);
		_exit(126);
	}
	pid_t child = fork();
	if (child < 0) {
		fprintf(stderr, "agentpool sandbox-exec: fork: %s\n", strerror(errno));
		_exit(126);
	}
	if (child == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		return;
	}
	// The daemon signals the terminal's process group, the child with it:
	// the parent outlives the child and reports its end.
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	int status;
	while (waitpid(child, &status, 0) < 0) {
		if (errno != EINTR) {
			_exit(126);
		}
	}
	if (WIFSIGNALED(status)) {
		_exit(128 + WTERMSIG(status));
	}
	_exit(WEXITSTATUS(status));
}
*/
import "C"
