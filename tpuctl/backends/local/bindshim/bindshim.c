/*
 * tpuctl's bind shim: preloaded (LD_PRELOAD) into local workers only.
 *
 * Why: TensorFlow's gRPC server binds "0.0.0.0:PORT" (grpc_server_lib.cc; no option changes
 * it), and that server has no authentication. A local launch names 127.0.0.1 in TF_CONFIG,
 * so nothing needs the server on any other interface. This library wraps bind() and, for the
 * ports listed in TPUCTL_LOOPBACK_PORTS only (the worker's own port that tpuctl reserved),
 * turns a wildcard address into loopback:
 *
 *   AF_INET  0.0.0.0             -> 127.0.0.1
 *   AF_INET6 ::  (IPV6_V6ONLY=1) -> ::1
 *   AF_INET6 ::  (dual-stack)    -> ::ffff:127.0.0.1, so IPv4 peers dialling 127.0.0.1
 *                                   (TF_CONFIG's addresses) still connect, as they did to [::]
 *
 * Every other bind (other ports, port 0, explicit addresses, UDP clients that bind before
 * sending) passes through untouched, so the worker's outbound access is never affected.
 * The port list is read once, at load time, so bind() never calls getenv() while another
 * thread may be changing the environment.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#define MAX_PORTS 64

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static bind_fn real_bind;
static unsigned short ports[MAX_PORTS];
static int port_count;

__attribute__((constructor)) static void tpuctl_bindshim_init(void) {
    real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    const char *list = getenv("TPUCTL_LOOPBACK_PORTS");
    if (list == NULL) return;
    const char *p = list;
    while (*p != '\0' && port_count < MAX_PORTS) {
        char *end;
        unsigned long value = strtoul(p, &end, 10);
        if (end == p) return; /* not a number: stop, keep what was read */
        if (value > 0 && value < 65536) ports[port_count++] = (unsigned short)value;
        if (*end != ',') return;
        p = end + 1;
    }
}

static int listed(unsigned short port) {
    for (int i = 0; i < port_count; i++)
        if (ports[i] == port) return 1;
    return 0;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    if (real_bind == NULL) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    if (real_bind == NULL) {
        errno = ENOSYS;
        return -1;
    }
    if (addr != NULL && port_count > 0) {
        if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
            struct sockaddr_in copy;
            memcpy(&copy, addr, sizeof copy);
            if (copy.sin_addr.s_addr == htonl(INADDR_ANY) && listed(ntohs(copy.sin_port))) {
                copy.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                return real_bind(fd, (const struct sockaddr *)&copy, sizeof copy);
            }
        } else if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
            struct sockaddr_in6 copy;
            memcpy(&copy, addr, sizeof copy);
            if (IN6_IS_ADDR_UNSPECIFIED(&copy.sin6_addr) && listed(ntohs(copy.sin6_port))) {
                int v6only = 0;
                socklen_t size = sizeof v6only;
                if (getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &size) == 0 && v6only) {
                    copy.sin6_addr = in6addr_loopback;
                } else {
                    memset(&copy.sin6_addr, 0, sizeof copy.sin6_addr);
                    copy.sin6_addr.s6_addr[10] = 0xff;
                    copy.sin6_addr.s6_addr[11] = 0xff;
                    copy.sin6_addr.s6_addr[12] = 127;
                    copy.sin6_addr.s6_addr[15] = 1;
                }
                return real_bind(fd, (const struct sockaddr *)&copy, sizeof copy);
            }
        }
    }
    return real_bind(fd, addr, len);
}
