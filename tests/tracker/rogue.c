#include "rogue.h"

#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "trk_test.h"

static int read_all(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 10000) <= 0)
      return -1;
    ssize_t n = recv(fd, p, len, 0);
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static json_t *recv_msg(int fd) {
  uint32_t le;
  if (read_all(fd, &le, 4) < 0 || le32toh(le) > (1u << 20))
    return NULL;
  size_t n = le32toh(le);
  char *buf = malloc(n);
  json_t *v = buf && read_all(fd, buf, n) == 0 ? json_loadb(buf, n, 0, NULL) : NULL;
  free(buf);
  return v;
}

static void send_text(int fd, const char *t) {
  uint32_t le = htole32((uint32_t)strlen(t));
  send(fd, &le, 4, MSG_NOSIGNAL);
  send(fd, t, strlen(t), MSG_NOSIGNAL);
}

/* TVM's server side of the handshake, accepting any client key. */
static int handshake(int fd) {
  uint32_t magic, len;
  char key[4096];
  if (read_all(fd, &magic, 4) < 0 || le32toh(magic) != KC_RPC_MAGIC || read_all(fd, &len, 4) < 0 ||
      le32toh(len) >= sizeof key || read_all(fd, key, le32toh(len)) < 0)
    return -1;
  const char *sk = "server:rogue";
  uint32_t reply[2] = {htole32(KC_RPC_CODE_SUCCESS), htole32((uint32_t)strlen(sk))};
  send(fd, reply, sizeof reply, MSG_NOSIGNAL);
  send(fd, sk, strlen(sk), MSG_NOSIGNAL);
  return 0;
}

/* One session: hello, files (their bytes are read and dropped), then the rogue reply
 * to "run". */
static void serve(rogue_agent *r, int fd) {
  json_t *m;
  while ((m = recv_msg(fd))) {
    const char *op = json_string_value(json_object_get(m, "op"));
    if (op && !strcmp(op, "hello")) {
      json_decref(r->last_hello);
      r->last_hello = json_incref(m);
      send_text(fd, r->hello ? r->hello : "{\"op\": \"hello\", \"version\": 1}");
    } else if (op && !strcmp(op, "file")) {
      size_t left = (size_t)json_integer_value(json_object_get(m, "size"));
      char buf[4096];
      while (left) {
        size_t c = left < sizeof buf ? left : sizeof buf;
        if (read_all(fd, buf, c) < 0)
          break;
        left -= c;
      }
      send_text(fd, "{\"op\": \"ok\"}");
    } else if (op && !strcmp(op, "run")) {
      json_decref(r->last_run);
      r->last_run = json_incref(m);
      send_text(fd, r->reply);
    } else {
      json_decref(m);
      break;
    }
    json_decref(m);
  }
}

static void *rogue_main(void *arg) {
  rogue_agent *r = arg;
  int trk = raw_connect(r->tracker_port, true);
  char mk[64];
  for (int i = 0; !r->stop; i++) {
    snprintf(mk, sizeof mk, "rogue:0.%d", i);
    if (i == 0)
      raw_register(trk, "rogue", r->port, mk);
    else {
      char put[160];
      snprintf(put, sizeof put, "[3, \"rogue\", [%u, \"%s\"], null]", r->port, mk);
      raw_call_expect(trk, put, "0");
    }
    struct pollfd pf = {.fd = r->lfd, .events = POLLIN};
    while (!r->stop && poll(&pf, 1, 100) <= 0)
      ;
    if (r->stop)
      break;
    int fd = accept(r->lfd, NULL, NULL);
    if (fd >= 0 && handshake(fd) == 0)
      serve(r, fd);
    if (fd >= 0)
      close(fd);
  }
  close(trk);
  return NULL;
}

void rogue_start(rogue_agent *r, uint16_t tracker_port, const char *reply) {
  r->tracker_port = tracker_port;
  r->reply = reply;
  r->stop = 0;
  r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  bind(r->lfd, (struct sockaddr *)&a, sizeof a);
  listen(r->lfd, 16);
  getsockname(r->lfd, (struct sockaddr *)&a, &al);
  r->port = ntohs(a.sin_port);
  pthread_t th;
  pthread_create(&th, NULL, rogue_main, r);
  r->thread = (unsigned long)th;
}

void rogue_stop(rogue_agent *r) {
  r->stop = 1;
  pthread_join((pthread_t)r->thread, NULL);
  close(r->lfd);
  json_decref(r->last_run);
  r->last_run = NULL;
  json_decref(r->last_hello);
  r->last_hello = NULL;
}
