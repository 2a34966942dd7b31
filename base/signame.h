/* Signal names as people read them. */
#ifndef KCAGE_SIGNAME_H
#define KCAGE_SIGNAME_H

/* "SIGSEGV" for 11, "SIG<n>" for a number glibc has no name for; the text lives in a
 * buffer of the calling thread, valid until its next call. */
const char *kc_signal_name(int sig);

#endif
