/* One line per event on stderr, with a level, for the daemons (kcage tracker, kcage
 * agent): "2026-01-02T03:04:05.678Z info kcage tracker: what happened".  Under
 * systemd (JOURNAL_STREAM set) the timestamp is left to journald and the level goes
 * first as a syslog priority ("<6>"), which journald reads.  Text from peers is
 * escaped: no control character reaches the terminal or splits a line. */
#ifndef KCAGE_LOG_H
#define KCAGE_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kc_log_level {
  KC_LOG_ERROR,
  KC_LOG_WARN,
  KC_LOG_INFO,
  KC_LOG_DEBUG,
} kc_log_level;

/* Events above `level` are dropped; the default is KC_LOG_INFO. */
void kc_log_set_level(kc_log_level level);
kc_log_level kc_log_get_level(void);
/* Would an event at `level` be written?  (Skip building costly messages.) */
int kc_log_enabled(kc_log_level level);
/* who: "kcage tracker", "kcage agent", ... */
void kc_log(kc_log_level level, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif
