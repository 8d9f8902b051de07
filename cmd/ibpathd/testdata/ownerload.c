/* ownerload: a small owner of the owner protocol for ibpathd's load
 * benchmark (BenchmarkOwnerProcesses): it attaches to the socket argv[1]
 * as itself, reports argv[2] QPs on mlx5_1 numbered from argv[3], says
 * "attached" on stdout, then answers every command "ok" until ibpathd or
 * stdin closes. A few hundred kB of memory, so that a thousand fit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

static unsigned long long start_time(void)
{
	char buf[1024];
	FILE *f = fopen("/proc/self/stat", "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	/* field 3 follows ") "; the start time is field 22 */
	unsigned long long v = 0;
	p += 2;
	for (int field = 3; field < 22 && p; field++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	if (p)
		v = strtoull(p, NULL, 10);
	return v;
}

static int send_all(int fd, const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, s, n);
		if (w <= 0)
			return -1;
		s += w, n -= (size_t)w;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: ownerload SOCKET NQPS FIRSTQPN\n");
		return 2;
	}
	int nqps = atoi(argv[2]);
	unsigned long first = strtoul(argv[3], NULL, 0);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	strncpy(a.sun_path, argv[1], sizeof(a.sun_path) - 1);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("ownerload: connect");
		return 1;
	}
	char line[65536];
	int n = snprintf(line, sizeof(line), "GET /v1/owner HTTP/1.1\r\nHost: ibpathd\r\nConnection: Upgrade\r\nUpgrade: ibpath-owner/1\r\n\r\n"
		"{\"type\":\"hello\",\"hello\":{\"proto\":1,\"pid\":%d,\"incarnation\":%llu,\"comm\":\"ownerload\"}}\n", getpid(), start_time());
	if (send_all(fd, line, (size_t)n))
		return 1;
	for (int i = 0; i < nqps; i++) {
		n = snprintf(line, sizeof(line), "{\"type\":\"qp\",\"qp\":{\"device\":\"mlx5_1\",\"qpn\":%lu,\"port\":1,"
			"\"layer\":\"apm\",\"apm\":\"armed\",\"primary\":\"port 1\",\"alternate\":\"port 2\",\"home\":\"port 1\"}}\n", first + (unsigned long)i);
		if (send_all(fd, line, (size_t)n))
			return 1;
	}
	/* the 101 response, then the welcome: attached; then every command
	 * line is answered */
	static char buf[1 << 17];
	size_t have = 0;
	int welcomed = 0;
	struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
	for (;;) {
		if (welcomed && poll(p, 2, -1) < 0)
			return 1;
		if (welcomed && p[1].revents)
			return 0; /* stdin closed: done */
		ssize_t r = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (r <= 0)
			return welcomed ? 0 : 1;
		have += (size_t)r;
		buf[have] = 0;
		char *l = buf, *nl;
		while ((nl = memchr(l, '\n', have - (size_t)(l - buf)))) {
			*nl = 0;
			if (!welcomed && strstr(l, "\"welcome\"")) {
				welcomed = 1;
				printf("attached\n");
				fflush(stdout);
			} else if (strstr(l, "\"type\":\"command\"")) {
				char *id = strstr(l, "\"id\":");
				unsigned long long v = id ? strtoull(id + 5, NULL, 10) : 0;
				n = snprintf(line, sizeof(line), "{\"type\":\"result\",\"id\":%llu,\"result\":{\"ok\":true,\"before\":\"armed port 1\",\"after\":\"armed port 1\"}}\n", v);
				if (send_all(fd, line, (size_t)n))
					return 1;
			}
			l = nl + 1;
		}
		have -= (size_t)(l - buf);
		memmove(buf, l, have);
	}
}
