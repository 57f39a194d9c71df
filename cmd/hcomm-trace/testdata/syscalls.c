// syscalls makes a known set of system calls, the same on every run, for
// the test that compares hcomm-trace's counts with strace -c -f's
// (main_test.go). Its own calls, after the dynamic loader's:
//
//	openat 3, write 10, pread64 5, lseek 1, read 7, access 5 (4 failing),
//	sendfile 1 (1000 B), pipe2 1, splice 2 (500 B each),
//	copy_file_range 1 (1000 B), close 5, unlink 2, and a fork (clone) whose
//	child execs this program with "child": openat 1, write 3 (1 B each to
//	/dev/null), close 1. The parent waits for it (wait4).
//
// Usage: syscalls DIR (DIR: a writable directory for its two files), or
// syscalls threads: two threads write 5 and 7 bytes to /dev/null, one write
// each byte, while the main thread waits for them.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

static int devnull_fd;

static void *writer(void *arg)
{
	long n = (long)arg;
	for (long i = 0; i < n; i++)
		if (write(devnull_fd, "x", 1) != 1)
			return (void *)1;
	return NULL;
}

static int threads(void)
{
	pthread_t a, b;
	void *ra, *rb;

	devnull_fd = open("/dev/null", O_WRONLY);
	if (devnull_fd < 0)
		return 1;
	if (pthread_create(&a, NULL, writer, (void *)5L) || pthread_create(&b, NULL, writer, (void *)7L))
		return 1;
	if (pthread_join(a, &ra) || pthread_join(b, &rb) || ra || rb)
		return 1;
	return 0;
}

static int child(void)
{
	int fd = open("/dev/null", O_WRONLY);
	if (fd < 0)
		return 1;
	for (int i = 0; i < 3; i++)
		if (write(fd, "x", 1) != 1)
			return 1;
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	char buf[100], path[4096], copy[4096], missing[4096];
	int fd, out, devnull, p[2], status;
	loff_t off = 0;
	pid_t pid;

	if (argc == 2 && strcmp(argv[1], "child") == 0)
		return child();
	if (argc == 2 && strcmp(argv[1], "threads") == 0)
		return threads();
	if (argc != 2)
		return 2;
	snprintf(path, sizeof(path), "%s/data", argv[1]);
	snprintf(copy, sizeof(copy), "%s/copy", argv[1]);
	snprintf(missing, sizeof(missing), "%s/missing-dir/x", argv[1]); /* ENOENT whatever / holds */
	memset(buf, 'a', sizeof(buf));

	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return 3;
	for (int i = 0; i < 10; i++)
		if (write(fd, buf, sizeof(buf)) != sizeof(buf))
			return 4;
	for (int i = 0; i < 5; i++)
		if (pread(fd, buf, sizeof(buf), i * 100) != sizeof(buf))
			return 5;
	lseek(fd, 0, SEEK_SET);
	for (int i = 0; i < 7; i++)
		if (read(fd, buf, sizeof(buf)) != sizeof(buf))
			return 6;
	for (int i = 0; i < 4; i++)
		if (access(missing, F_OK) == 0)
			return 7;
	if (access(path, R_OK) != 0)
		return 8;

	// Bytes the kernel moves with no user buffer: 1000 + 500 + 500 + 1000.
	devnull = open("/dev/null", O_WRONLY);
	if (devnull < 0)
		return 9;
	off = 0;
	if (sendfile(devnull, fd, &off, 1000) != 1000)
		return 10;
	if (pipe(p) != 0)
		return 11;
	off = 0;
	if (splice(fd, &off, p[1], NULL, 500, 0) != 500)
		return 12;
	if (splice(p[0], NULL, devnull, NULL, 500, 0) != 500)
		return 13;
	out = open(copy, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (out < 0)
		return 14;
	off = 0;
	if (copy_file_range(fd, &off, out, NULL, 1000, 0) != 1000)
		return 15;
	close(out);
	close(p[0]);
	close(p[1]);
	close(devnull);
	close(fd);

	pid = fork();
	if (pid < 0)
		return 16;
	if (pid == 0) {
		execl(argv[0], argv[0], "child", (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return 17;
	unlink(copy);
	unlink(path);
	return 0;
}
