/* The backend's error log (qmoe_ggml.h): ggml's logger with qmoe's message. Its own file, so the
 * backend's other files call it without calling each other. */
#include "qmoe_ggml.h"

/* ggml_log_internal is ggml's logger (ggml-impl.h, exported by ggml-base): a program's log
 * callback sees the message; declared here to keep ggml-impl.h's C++-minded parts out */
extern void ggml_log_internal(enum ggml_log_level level, const char *format, ...);

void qg_log_error(const char *what)
{
    ggml_log_internal(GGML_LOG_LEVEL_ERROR, "qmoe: %s: %s\n", what, qmoe_last_error());
}

void qg_log_debug(const char *what, const char *name)
{
    ggml_log_internal(GGML_LOG_LEVEL_DEBUG, "qmoe: %s: %s\n", name, what);
}
