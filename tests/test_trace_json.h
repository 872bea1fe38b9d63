/* Test helper: a small JSON syntax checker and a counter of compute slices per (device, thread)
 * in a trace exported by qmoe_trace_write. */
#ifndef QMOE_TEST_TRACE_JSON_H
#define QMOE_TEST_TRACE_JSON_H

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jp {
    const char *s;
    int ok;
} jp;

static void ws(jp *p)
{
    while (isspace((unsigned char)*p->s)) p->s++;
}

static void value(jp *p);

static void string(jp *p)
{
    if (*p->s != '"') {
        p->ok = 0;
        return;
    }
    for (p->s++; *p->s && *p->s != '"'; p->s++)
        if (*p->s == '\\' && p->s[1]) p->s++;
    if (*p->s != '"') p->ok = 0;
    else p->s++;
}

static void number(jp *p)
{
    const char *start = p->s;
    if (*p->s == '-') p->s++;
    while (isdigit((unsigned char)*p->s)) p->s++;
    if (*p->s == '.') {
        p->s++;
        if (!isdigit((unsigned char)*p->s)) p->ok = 0;
        while (isdigit((unsigned char)*p->s)) p->s++;
    }
    if (p->s == start) p->ok = 0;
}

static void composite(jp *p, char open, char close, int keyed)
{
    p->s++;
    ws(p);
    if (*p->s == close) {
        p->s++;
        return;
    }
    while (p->ok) {
        ws(p);
        if (keyed) {
            string(p);
            ws(p);
            if (*p->s != ':') p->ok = 0;
            else p->s++;
        }
        value(p);
        ws(p);
        if (*p->s == ',') p->s++;
        else if (*p->s == close) {
            p->s++;
            return;
        } else p->ok = 0;
    }
    (void)open;
}

static void value(jp *p)
{
    ws(p);
    if (*p->s == '{') composite(p, '{', '}', 1);
    else if (*p->s == '[') composite(p, '[', ']', 0);
    else if (*p->s == '"') string(p);
    else number(p);
}

static int json_valid(const char *text)
{
    jp p = {text, 1};
    value(&p);
    ws(&p);
    return p.ok && *p.s == '\0';
}

/* The whole file, NUL-terminated (the terminator is not counted in *len); NULL if unreadable.
 * Binary files hold NULs: compare them with *len, not strlen. */
static char *slurp_n(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    long n = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    char *buf = n >= 0 && !fseek(f, 0, SEEK_SET) ? malloc((size_t)n + 1) : NULL;
    if (buf) {
        size_t got = fread(buf, 1, (size_t)n, f);
        buf[got] = '\0';
        if (len) *len = got;
    }
    fclose(f);
    return buf;
}

static char *slurp(const char *path) { return slurp_n(path, NULL); }

/* Compute start events per (device, thread) in the exported file. */
static int count_compute(const char *text, int device, int thread)
{
    char pat[96];
    snprintf(pat, sizeof pat, "\"name\":\"compute\",\"cat\":\"qmoe\",\"ph\":\"B\"");
    char who[64];
    snprintf(who, sizeof who, "\"pid\":%d,\"tid\":%d,", device, thread);
    int n = 0;
    for (const char *s = strstr(text, pat); s; s = strstr(s + 1, pat)) {
        const char *end = strchr(s, '}');
        const char *w = strstr(s, who);
        if (w && w < end) n++;
    }
    return n;
}

#endif
