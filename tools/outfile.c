/*
 * Output files that never cost the user data: inputs and outputs compared as files, regular
 * targets replaced atomically only once every output is complete (old bytes kept as a hard link
 * until then), links followed, devices and pipes written in place. See outfile.h.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "outfile.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_LINKS = 40, TMP_NAME_MAX = 200 };

int (*outfile_rename)(const char *from, const char *to) = rename;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int
fail(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, OUTFILE_ERR_LEN, fmt, ap);
    va_end(ap);
    return -1;
}

static char *join(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    char *s = malloc(alen + blen + 2);
    if (!s) return NULL;
    memcpy(s, a, alen);
    size_t n = alen;
    if (n == 0 || s[n - 1] != '/') s[n++] = '/';
    memcpy(s + n, b, blen + 1);
    return s;
}

void outfiles_init(outfiles *s) { memset(s, 0, sizeof *s); }

int outfiles_input(outfiles *s, const char *option, const char *path)
{
    if (s->nin == OUTFILES_MAX) return -1;
    outfile_input *in = &s->in[s->nin++];
    struct stat st;
    in->option = option;
    in->path = path;
    in->known = !stat(path, &st); /* a missing input is reported when it is read */
    if (in->known) {
        in->dev = st.st_dev;
        in->ino = st.st_ino;
        in->mode = st.st_mode;
    }
    return 0;
}

outfile *outfiles_output(outfiles *s, const char *option, const char *path)
{
    if (s->n == OUTFILES_MAX) return NULL;
    outfile *o = &s->out[s->n++];
    memset(o, 0, sizeof *o);
    o->option = option;
    o->path = path;
    return o;
}

/* The path a symbolic link names, relative links taken from the link's folder. */
static char *follow_link(const char *link, char *err)
{
    char buf[PATH_MAX];
    ssize_t n = readlink(link, buf, sizeof buf - 1);
    if (n < 0) {
        fail(err, "cannot read the link: %s", strerror(errno));
        return NULL;
    }
    buf[n] = '\0';
    const char *slash = strrchr(link, '/');
    size_t dlen = buf[0] == '/' || !slash ? 0 : (size_t)(slash - link) + 1; /* keeps the '/' */
    char *next = malloc(dlen + (size_t)n + 1);
    if (next) {
        memcpy(next, link, dlen);
        memcpy(next + dlen, buf, (size_t)n + 1);
    }
    if (!next) fail(err, "out of memory");
    return next;
}

/* A file that does not exist yet: its folder resolved, its name kept. */
static int resolve_new(outfile *o, const char *path, char *err)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
        return fail(err, "names a folder, not a file");
    char *dir = slash ? malloc((size_t)(slash - path) + 2) : NULL;
    if (slash) {
        if (!dir) return fail(err, "out of memory");
        size_t len = slash == path ? 1 : (size_t)(slash - path); /* "/name": the root */
        memcpy(dir, path, len);
        dir[len] = '\0';
    }
    char *real = realpath(dir ? dir : ".", NULL);
    int e = errno;
    free(dir);
    if (!real) return fail(err, "its folder cannot be used: %s", strerror(e));
    struct stat st;
    if (stat(real, &st) || !S_ISDIR(st.st_mode)) {
        free(real);
        return fail(err, "its folder is not a folder");
    }
    o->target = join(real, strlen(real), name);
    free(real);
    if (!o->target) return fail(err, "out of memory");
    o->kind = OUTFILE_NEW;
    return 0;
}

static int resolve(outfile *o, char *err)
{
    if (!*o->path) return fail(err, "the file name is empty");
    char *cur = strdup(o->path);
    if (!cur) return fail(err, "out of memory");
    int rc = -1;
    for (int hops = 0;; hops++) {
        struct stat st;
        if (hops > MAX_LINKS) {
            fail(err, "too many levels of symbolic links");
            break;
        }
        if (lstat(cur, &st)) {
            if (errno == ENOENT) rc = resolve_new(o, cur, err);
            else fail(err, "%s", strerror(errno));
            break;
        }
        if (S_ISLNK(st.st_mode)) {
            char *next = follow_link(cur, err);
            free(cur);
            if (!(cur = next)) return -1;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            fail(err, "is a folder");
            break;
        }
        if (!(o->target = realpath(cur, NULL))) {
            fail(err, "%s", strerror(errno));
            break;
        }
        o->kind = S_ISREG(st.st_mode) ? OUTFILE_REPLACE : OUTFILE_IN_PLACE;
        o->dev = st.st_dev;
        o->ino = st.st_ino;
        o->mode = st.st_mode;
        rc = 0;
        break;
    }
    free(cur);
    return rc;
}

/* One file named twice? Character devices may be: writing to them destroys nothing. */
static int same_file(const outfile *a, const outfile *b)
{
    if (a->kind == OUTFILE_NEW || b->kind == OUTFILE_NEW)
        return a->kind == b->kind && !strcmp(a->target, b->target);
    return a->dev == b->dev && a->ino == b->ino && !S_ISCHR(a->mode);
}

int outfiles_check(outfiles *s, char *err)
{
    char why[OUTFILE_ERR_LEN];
    for (int i = 0; i < s->n; i++) {
        outfile *o = &s->out[i];
        if (resolve(o, why)) return fail(err, "%s: %.200s: %s", o->option, o->path, why);
        for (int j = 0; j < i; j++)
            if (same_file(&s->out[j], o))
                return fail(err, "%s: %.200s is the same file as %s (%.200s); give each output "
                                 "its own file", o->option, o->path, s->out[j].option,
                            s->out[j].path);
        for (int j = 0; j < s->nin; j++) {
            const outfile_input *in = &s->in[j];
            if (o->kind != OUTFILE_NEW && in->known && in->dev == o->dev && in->ino == o->ino &&
                !S_ISCHR(o->mode))
                return fail(err, "%s: %.200s is the same file as the %s input (%.200s); writing "
                                 "it would destroy the input", o->option, o->path, in->option,
                            in->path);
        }
    }
    return 0;
}

/* Writes o into a temporary file next to its target, with the mode the target has (or a new
 * file would get). */
static int stage(outfile *o, char *err)
{
    const char *slash = strrchr(o->target, '/'); /* the target is absolute */
    const char *name = slash + 1;
    size_t dlen = (size_t)(slash - o->target);
    size_t cap = dlen + strlen(name) + 32;
    if (!(o->tmp = malloc(cap))) return fail(err, "out of memory");
    snprintf(o->tmp, cap, "%.*s/.%.*s.qmoe-XXXXXX", (int)dlen, o->target, TMP_NAME_MAX, name);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        int e = errno;
        free(o->tmp);
        o->tmp = NULL;
        return fail(err, "cannot create a temporary file in its folder: %s", strerror(e));
    }
    mode_t mode;
    if (o->kind == OUTFILE_REPLACE) {
        mode = o->mode & 07777;
    } else { /* mkstemp makes 0600; give what a plain fopen would */
        mode_t mask = umask(0);
        umask(mask);
        mode = 0666 & ~mask;
    }
    int rc = fchmod(fd, mode) ? fail(err, "cannot set the mode: %s", strerror(errno)) : 0;
    if (close(fd) && !rc) rc = fail(err, "%s", strerror(errno));
    if (!rc) rc = o->write(o->tmp, o->ctx, err);
    return rc;
}

/* The old file stays reachable under a second name until every output is in place. */
static int keep_backup(outfile *o, char *err)
{
    size_t len = strlen(o->tmp);
    if (!(o->backup = malloc(len + 5))) return fail(err, "out of memory");
    memcpy(o->backup, o->tmp, len);
    memcpy(o->backup + len, ".old", 5);
    if (link(o->target, o->backup)) {
        int e = errno;
        free(o->backup);
        o->backup = NULL;
        return fail(err, "cannot keep the old file while replacing it (hard link: %s)",
                    strerror(e));
    }
    return 0;
}

/* Undoes the renames done so far; returns 0, or -1 when an old file could not be put back (it
 * is then left under its backup name, which the message gives). */
static int roll_back(outfiles *s, char *err, size_t cap)
{
    int rc = 0;
    for (int i = 0; i < s->n; i++) {
        outfile *o = &s->out[i];
        if (!o->renamed) continue;
        if (o->kind == OUTFILE_NEW) {
            unlink(o->target);
        } else if (rename(o->backup, o->target)) {
            size_t n = strlen(err);
            snprintf(err + n, cap - n, "; the old %.100s is kept as %.200s", o->path, o->backup);
            free(o->backup); /* keep the file: it holds the user's data */
            o->backup = NULL;
            rc = -1;
        }
        o->renamed = 0;
    }
    return rc;
}

int outfiles_write(outfiles *s, char *err)
{
    char why[OUTFILE_ERR_LEN];
    int rc = 0, bad = -1;
    /* 1: every regular output complete in a temporary file */
    for (int i = 0; i < s->n && !rc; i++)
        if (s->out[i].kind != OUTFILE_IN_PLACE && (rc = stage(&s->out[i], why))) bad = i;
    /* 2: devices and pipes, now that everything else is ready */
    for (int i = 0; i < s->n && !rc; i++)
        if (s->out[i].kind == OUTFILE_IN_PLACE &&
            (rc = s->out[i].write(s->out[i].target, s->out[i].ctx, why)))
            bad = i;
    /* 3: old files kept, then every rename */
    for (int i = 0; i < s->n && !rc; i++)
        if (s->out[i].kind == OUTFILE_REPLACE && (rc = keep_backup(&s->out[i], why))) bad = i;
    for (int i = 0; i < s->n && !rc; i++) {
        outfile *o = &s->out[i];
        if (o->kind == OUTFILE_IN_PLACE) continue;
        if (outfile_rename(o->tmp, o->target)) {
            rc = fail(why, "cannot move the finished file into place: %s", strerror(errno));
            bad = i;
        } else {
            o->renamed = 1;
            free(o->tmp);
            o->tmp = NULL;
        }
    }
    if (rc) {
        fail(err, "%.200s: %s", s->out[bad].path, why);
        roll_back(s, err, OUTFILE_ERR_LEN);
    }
    for (int i = 0; i < s->n; i++) s->out[i].renamed = 0; /* done: the backups go */
    outfiles_free(s);
    return rc;
}

void outfiles_free(outfiles *s)
{
    for (int i = 0; i < s->n; i++) {
        outfile *o = &s->out[i];
        if (o->tmp) unlink(o->tmp);
        if (o->backup) unlink(o->backup);
        free(o->tmp);
        free(o->backup);
        free(o->target);
        o->tmp = o->backup = o->target = NULL;
    }
}
