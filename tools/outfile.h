/*
 * Output files a command writes, handled so that a user's data is never lost:
 *
 * - Inputs and outputs are compared as files (device and inode after following links; for an
 *   output that does not exist yet, its resolved folder and name), before anything is read or
 *   written: naming one file twice (an output that is an input, two outputs that are one file) is
 *   an error. Character devices are exempt: writing /dev/null twice destroys nothing.
 * - A regular-file target (or one that does not exist yet) is written to a temporary file in the
 *   target's folder and renamed over it only after every output of the command is complete. The
 *   old file is kept as a hard link until every rename has succeeded, so on any failure every
 *   pre-existing file keeps its old bytes and no new file is left behind.
 * - A symbolic link is followed: the file it names is replaced, the link stays a link.
 * - A character device, pipe or other non-regular target is opened and written in place (no
 *   temporary file), after every regular output has been staged (what went into a pipe cannot
 *   be taken back if a rename fails after it; regular files are still restored).
 *
 * Usage: outfiles_init; outfiles_input / outfiles_output for every path; outfiles_check before
 * reading any input; set each output's writer; outfiles_write; outfiles_free.
 */
#ifndef QMOE_TOOLS_OUTFILE_H
#define QMOE_TOOLS_OUTFILE_H

#include <sys/types.h>

#define OUTFILE_ERR_LEN 512
enum { OUTFILES_MAX = 16 };

/* Writes the whole content to `path` (it opens the path itself: a temporary file, or a device or
 * pipe written in place). Returns 0, or -1 with a reason in err (OUTFILE_ERR_LEN). */
typedef int (*outfile_writer)(const char *path, void *ctx, char *err);

typedef enum outfile_kind {
    OUTFILE_NEW,      /* does not exist yet: staged, then renamed into place */
    OUTFILE_REPLACE,  /* a regular file: staged, old bytes kept until every output is in place */
    OUTFILE_IN_PLACE, /* a device, pipe, socket...: written directly */
} outfile_kind;

typedef struct outfile {
    const char *option; /* for messages, e.g. "--out" */
    const char *path;   /* as the user gave it */
    outfile_writer write;
    void *ctx;
    /* filled by outfiles_check */
    outfile_kind kind;
    char *target; /* links resolved: the file that is replaced or created */
    dev_t dev;
    ino_t ino;
    mode_t mode;
    /* write phase */
    char *tmp, *backup;
    int renamed;
} outfile;

typedef struct outfile_input {
    const char *option, *path;
    int known; /* it exists: dev and ino are set */
    dev_t dev;
    ino_t ino;
    mode_t mode;
} outfile_input;

typedef struct outfiles {
    int n, nin;
    outfile out[OUTFILES_MAX];
    outfile_input in[OUTFILES_MAX];
} outfiles;

void outfiles_init(outfiles *s);

/* Register a file the command reads / writes; returns NULL (output) or -1 (input) when full. */
int outfiles_input(outfiles *s, const char *option, const char *path);
outfile *outfiles_output(outfiles *s, const char *option, const char *path);

/* Resolves every output and compares all files; -1 with "OPTION: PATH: reason" in err. */
int outfiles_check(outfiles *s, char *err);

/* Writes every output (all writers set) so that they appear together or not at all; -1 with
 * "PATH: reason" in err. Call after outfiles_check. */
int outfiles_write(outfiles *s, char *err);

/* Frees what check and write allocated (and removes temporary files still there). */
void outfiles_free(outfiles *s);

/* Test seam: the rename used to move finished files into place (default: rename(2)). */
extern int (*outfile_rename)(const char *from, const char *to);

#endif
