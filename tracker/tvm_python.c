/* The operator's Python for TVM sessions: where it is and which of its directories the
 * sandboxes need (tvm_session.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "kcage/cleanup.h"
#include "tvm_session.h"

#define PROBE_S 20.0
#define PROBE_MAX (256u << 10)

/* Where its files are, and whether it has TVM at all (found, not imported: that takes
 * seconds). */
static const char probe_src[] =
    "import importlib.util, json, os, sys, sysconfig\n"
    "def libpython():\n"
    "    v = sysconfig.get_config_var\n"
    "    dirs = [v('LIBDIR') or ''] + (['/usr/lib/' + v('MULTIARCH')] if v('MULTIARCH') else [])\n"
    "    for d in dirs:\n"
    "        for n in (v('INSTSONAME'), v('LDLIBRARY')):\n"
    "            if n and '.so' in n and os.path.exists(os.path.join(d, n)):\n"
    "                return os.path.realpath(os.path.join(d, n))\n"
    "    return ''\n"
    "print(json.dumps({'paths': [sys.prefix, sys.base_prefix] + sys.path, 'sys_path': sys.path,\n"
    "                  'libpython': libpython(),\n"
    "                  'tvm': importlib.util.find_spec('tvm') is not None}))\n";

/* "." and ".." taken out by the letter, links left alone: the sandbox has only some of
 * the directories a ".." might pass through. */
static void normalize(char *path) {
  char out[PATH_MAX] = "";
  size_t n = 0;
  for (char *save = NULL, *c = strtok_r(path, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    if (!strcmp(c, "."))
      continue;
    if (!strcmp(c, "..")) {
      char *slash = strrchr(out, '/');
      n = slash ? (size_t)(slash - out) : 0;
      out[n] = '\0';
      continue;
    }
    n += (size_t)snprintf(out + n, sizeof out - n, "/%s", c);
    if (n >= sizeof out)
      n = sizeof out - 1;
  }
  snprintf(path, PATH_MAX, "%s", n ? out : "/");
}

static int find_in_path(const char *name, char *out, size_t len, kc_error *err) {
  if (strchr(name, '/')) {
    /* absolute, but not resolved: a venv's bin/python is a link whose own place says
     * which venv it runs */
    char cwd[PATH_MAX] = "";
    if (name[0] != '/' && !getcwd(cwd, sizeof cwd))
      return kc_error_set(err, errno, "getcwd");
    if ((size_t)snprintf(out, len, "%s%s%s", cwd, cwd[0] ? "/" : "", name) >= len)
      return kc_error_set(err, ENAMETOOLONG, "%s", name);
    normalize(out);
    return access(out, X_OK) == 0 ? 0 : kc_error_set(err, errno, "%s", name);
  }
  const char *path = getenv("PATH");
  kc_cleanup_free char *copy = strdup(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
  if (!copy)
    return kc_error_set(err, ENOMEM, "PATH");
  for (char *save = NULL, *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    if (*d != '/')
      continue; /* a relative PATH entry means nothing to the agent's later sessions */
    snprintf(out, len, "%s/%s", d, name);
    if (access(out, X_OK) == 0)
      return 0;
  }
  return kc_error_set(err, ENOENT, "%s not found in PATH", name);
}

/* The probe's stdout, read with a deadline; the probe is killed after it. */
static int run_probe(const char *python, char **out, kc_error *err) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    return kc_error_set(err, errno, "pipe");
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return kc_error_set(err, errno, "fork");
  }
  if (pid == 0) {
    dup2(p[1], 1);
    char *argv[] = {(char *)python, "-I", "-c", (char *)probe_src, NULL};
    execv(python, argv);
    _exit(127);
  }
  close(p[1]);
  char *buf = calloc(1, PROBE_MAX + 1);
  size_t got = 0;
  double deadline = kc_now_s() + PROBE_S;
  while (buf && got < PROBE_MAX) {
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    double left = deadline - kc_now_s();
    if (left <= 0 || poll(&pf, 1, (int)(left * 1000) + 1) <= 0)
      break;
    ssize_t n = read(p[0], buf + got, PROBE_MAX - got);
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  close(p[0]);
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!buf)
    return kc_error_set(err, ENOMEM, "probe");
  if (!WIFEXITED(st) || WEXITSTATUS(st)) {
    free(buf);
    return kc_error_set(err, 0, "%s did not run (status %d)", python, st);
  }
  *out = buf;
  return 0;
}

static bool under(const char *p, const char *root) {
  size_t n = strlen(root);
  return !strncmp(p, root, n) && (p[n] == '/' || p[n] == '\0');
}

/* One directory of the interpreter's into the bind list: outside /usr (the policies
 * bind it), not inside one already listed; one that contains listed ones replaces them. */
static void add_bind(kc_tvm_python *py, const char *entry) {
  char real[PATH_MAX];
  struct stat st;
  if (!realpath(entry, real) || stat(real, &st) < 0)
    return;
  if (!S_ISDIR(st.st_mode)) { /* a zip on sys.path */
    char *slash = strrchr(real, '/');
    if (!slash || slash == real)
      return;
    *slash = '\0';
  }
  if (under(real, "/usr") || !strcmp(real, "/"))
    return;
  for (size_t i = 0; i < py->nbinds; i++)
    if (under(real, py->binds[i]))
      return;
  size_t w = 0;
  for (size_t i = 0; i < py->nbinds; i++)
    if (!under(py->binds[i], real))
      memmove(py->binds[w++], py->binds[i], PATH_MAX);
  py->nbinds = w;
  if (py->nbinds < KC_TVM_MAX_BINDS)
    snprintf(py->binds[py->nbinds++], PATH_MAX, "%s", real);
}

int kc_tvm_python_probe(const char *python, kc_tvm_python *out, kc_error *err) {
  memset(out, 0, sizeof *out);
  if (find_in_path(python ? python : "python3", out->path, sizeof out->path, err) < 0)
    return -1;
  kc_cleanup_free char *text = NULL;
  if (run_probe(out->path, &text, err) < 0)
    return -1;
  json_t *answer = json_loads(text, 0, NULL), *paths = json_object_get(answer, "paths");
  if (!json_is_array(paths)) {
    json_decref(answer);
    return kc_error_set(err, EPROTO, "%s: unexpected answer to the probe", out->path);
  }
  if (!json_is_true(json_object_get(answer, "tvm"))) {
    json_decref(answer);
    return kc_error_set(err, ENOENT, "%s has no tvm package", out->path);
  }
  size_t i;
  json_t *v;
  json_array_foreach(paths, i, v) if (json_is_string(v) && json_string_value(v)[0] == '/')
      add_bind(out, json_string_value(v));
  json_t *sp = json_pack("O", json_object_get(answer, "sys_path"));
  char *sp_text = json_is_array(sp) ? json_dumps(sp, JSON_COMPACT) : NULL;
  json_decref(sp);
  if (sp_text && strlen(sp_text) < sizeof out->sys_path)
    snprintf(out->sys_path, sizeof out->sys_path, "%s", sp_text);
  free(sp_text);
  /* the shared libpython, which the agent's TVM zygote embeds ("" when there is none:
   * then each session starts the interpreter itself) */
  const char *lib = json_string_value(json_object_get(answer, "libpython"));
  if (lib && lib[0] == '/' && strlen(lib) < sizeof out->libpython && out->sys_path[0]) {
    snprintf(out->libpython, sizeof out->libpython, "%s", lib);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", lib);
    *strrchr(dir, '/') = '\0';
    if (dir[0])
      add_bind(out, dir);
  }
  json_decref(answer);
  return 0;
}
