/* Nothing foreign stays executable: the kernel's .so is refused before it is loaded
 * when it asks for memory that is writable and executable at once, and once it is
 * loaded (and the worker sealed) the parent reads the worker's mappings from outside
 * (/proc/PID/maps: the kernel's account, not the worker's): no mapping may be
 * writable and executable, and executable code may come only from the kernel's own
 * .so, the system's libraries (/usr, bound read-only) and the worker program (with
 * --no-isolation, a fork of the caller: also the code the caller itself maps).  The
 * seal forbids new executable mappings; this audit covers the ones made before it (a
 * constructor or an ifunc resolver mapping a file RWX, say). */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "measure_kernel.h"

int kc_audit_elf_image(const unsigned char *img, size_t len, char *msg, size_t cap) {
  if (len < sizeof(Elf64_Ehdr) || memcmp(img, ELFMAG, SELFMAG) || img[EI_CLASS] != ELFCLASS64)
    return 0; /* not ours to judge: the loader refuses it with its own words */
  Elf64_Ehdr eh;
  memcpy(&eh, img, sizeof eh);
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff > len ||
      (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) > len - eh.e_phoff)
    return 0;
  for (uint16_t i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    memcpy(&ph, img + eh.e_phoff + (size_t)i * sizeof ph, sizeof ph);
    if ((ph.p_type == PT_LOAD || ph.p_type == PT_GNU_STACK) && (ph.p_flags & PF_W) &&
        (ph.p_flags & PF_X)) {
      snprintf(msg, cap,
               "load: the kernel's .so asks for memory that is writable and executable (%s "
               "segment %u): refused before loading",
               ph.p_type == PT_LOAD ? "PT_LOAD" : "PT_GNU_STACK", i);
      return -1;
    }
  }
  return 0;
}

int kc_audit_elf(const char *path, char *msg, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0; /* the load reports it */
  unsigned char buf[64 * 1024];
  ssize_t n = pread(fd, buf, sizeof buf, 0);
  close(fd);
  if (n <= 0)
    return 0;
  /* program headers past the first 64 KiB: the loader maps them all, so refuse */
  Elf64_Ehdr eh;
  if ((size_t)n >= sizeof eh) {
    memcpy(&eh, buf, sizeof eh);
    if (!memcmp(buf, ELFMAG, SELFMAG) &&
        (uint64_t)eh.e_phoff + (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) > (uint64_t)n) {
      snprintf(msg, cap, "load: the kernel's program headers lie outside its first 64 KiB");
      return -1;
    }
  }
  return kc_audit_elf_image(buf, (size_t)n, msg, cap);
}

/* One line of /proc/PID/maps: "lo-hi perms off dev inode   path".  0 fine, -1 refused. */
int kc_audit_maps_line(const char *line, const char *artifact, const char *exe, char *msg,
                       size_t cap) {
  unsigned long long lo, hi, off, inode;
  char perms[8], dev[32];
  int used = 0;
  if (sscanf(line, "%llx-%llx %7s %llx %31s %llu %n", &lo, &hi, perms, &off, dev, &inode, &used) <
          6 ||
      strlen(perms) < 3)
    return 0;
  const char *path = line + used;
  size_t pl = strcspn(path, "\n");
  if (perms[2] != 'x')
    return 0;
  if (perms[1] == 'w') {
    snprintf(msg, cap, "load: memory %llx-%llx (%.*s) is writable and executable", lo, hi,
             (int)(pl > 200 ? 200 : pl), pl ? path : "anonymous");
    return -1;
  }
  bool ok = (pl == strlen(artifact) && !strncmp(path, artifact, pl)) ||
            (exe && pl == strlen(exe) && !strncmp(path, exe, pl)) || !strncmp(path, "/usr/", 5) ||
            (pl == 6 && !strncmp(path, "[vdso]", 6)) ||
            (pl == 10 && !strncmp(path, "[vsyscall]", 10));
  if (ok)
    return 0;
  snprintf(msg, cap,
           "load: executable memory %llx-%llx from %.*s, which is neither the kernel's .so nor a "
           "system library",
           lo, hi, (int)(pl > 200 ? 200 : pl), pl ? path : "anonymous memory");
  return -1;
}

/* A line of /proc/PID/maps that maps a file executable and not writable: its path (pl
 * bytes), else NULL. */
static const char *code_path(const char *line, size_t *pl) {
  unsigned long long lo, hi, off, inode;
  char perms[8], dev[32];
  int used = 0;
  if (sscanf(line, "%llx-%llx %7s %llx %31s %llu %n", &lo, &hi, perms, &off, dev, &inode, &used) <
          6 ||
      strlen(perms) < 3 || perms[1] == 'w' || perms[2] != 'x' || line[used] != '/')
    return NULL;
  *pl = strcspn(line + used, "\n");
  return line + used;
}

/* Whether this process maps the same file as code: a plain measuring process is a fork
 * of ours, and what it inherited is the caller's code, not the kernel's doing (a
 * Python caller's extension modules, a library user's own .so outside /usr). */
static bool inherited_code(const char *line) {
  size_t pl, ml;
  const char *path = code_path(line, &pl), *mine;
  FILE *f = path ? fopen("/proc/self/maps", "re") : NULL;
  if (!f)
    return false;
  char buf[8192];
  bool found = false;
  while (!found && fgets(buf, sizeof buf, f))
    found = (mine = code_path(buf, &ml)) && ml == pl && !strncmp(mine, path, pl);
  fclose(f);
  return found;
}

int kc_audit_maps(pid_t pid, const char *artifact, bool inherited, char *msg, size_t cap) {
  char path[64], exe[4096];
  snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
  ssize_t el = readlink(path, exe, sizeof exe - 1);
  if (el > 0)
    exe[el] = 0;
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *f = pid > 0 ? fopen(path, "re") : NULL;
  if (!f) {
    snprintf(msg, cap, "load: cannot read the worker's mappings (%s): refusing to time it",
             strerror(errno));
    return -2;
  }
  char line[8192];
  int rc = 0;
  while (!rc && fgets(line, sizeof line, f))
    if (kc_audit_maps_line(line, artifact, el > 0 ? exe : NULL, msg, cap) < 0 &&
        !(inherited && inherited_code(line)))
      rc = -1;
  fclose(f);
  return rc;
}
