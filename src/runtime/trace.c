/* Trace buffers and their export as Chrome trace-event JSON (ui.perfetto.dev opens it). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/trace.h"

#include <stdlib.h>
#include <time.h>

qmoe_trace_buf *qmoe_trace_buf_create(uint32_t cap, int32_t device, int32_t thread)
{
    qmoe_trace_buf *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->recs = calloc(cap ? cap : 1, sizeof *t->recs);
    if (!t->recs) {
        free(t);
        return NULL;
    }
    t->cap = cap;
    t->device = device;
    t->thread = thread;
    return t;
}

void qmoe_trace_buf_destroy(qmoe_trace_buf *t)
{
    if (!t) return;
    free(t->recs);
    free(t);
}

void qmoe_trace_record(qmoe_trace_buf *t, qmoe_trace_event ev, int start, uint16_t info)
{
    if (t->count == t->cap) {
        t->dropped++;
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t->recs[t->count++] = (qmoe_trace_rec){
        .ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
        .info = info,
        .ev = (uint8_t)ev,
        .start = (uint8_t)(start != 0),
    };
}

const char *qmoe_trace_event_name(qmoe_trace_event ev)
{
    static const char *names[QMOE_EV_COUNT] = {"plan", "copy", "compute", "epilogue", "fence"};
    return (unsigned)ev < QMOE_EV_COUNT ? names[ev] : "unknown";
}

int qmoe_trace_write_json(FILE *f, qmoe_trace_buf *const *bufs, int nbufs)
{
    uint64_t t0 = UINT64_MAX;
    for (int b = 0; b < nbufs; b++)
        if (bufs[b]->count && bufs[b]->recs[0].ns < t0) t0 = bufs[b]->recs[0].ns;
    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", f);
    const char *sep = "";
    for (int b = 0; b < nbufs; b++) {
        const qmoe_trace_buf *t = bufs[b];
        /* names for the viewer's process (device) and thread rows */
        fprintf(f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"name\":\"qmoe device %d\"}},\n",
                sep, (int)t->device, (int)t->thread, (int)t->device);
        fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"name\":\"thread %d\"}}",
                (int)t->device, (int)t->thread, (int)t->thread);
        sep = ",\n";
        for (uint32_t i = 0; i < t->count; i++) {
            const qmoe_trace_rec *r = &t->recs[i];
            uint64_t rel = r->ns - t0;
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"qmoe\",\"ph\":\"%s\",\"ts\":%llu.%03u,"
                       "\"pid\":%d,\"tid\":%d,\"args\":{\"info\":%u}}",
                    qmoe_trace_event_name((qmoe_trace_event)r->ev), r->start ? "B" : "E",
                    (unsigned long long)(rel / 1000), (unsigned)(rel % 1000), (int)t->device,
                    (int)t->thread, (unsigned)r->info);
        }
    }
    fputs("\n]}\n", f);
    return ferror(f) ? -1 : 0;
}
