/*
 * tools/outfile.c, the rules every command's output files follow: files compared as files
 * (spellings, links, hard links, inputs), all-or-nothing commits with the old bytes restored when
 * a later step fails (a failing writer, a failing rename through the test seam), links followed,
 * pipes and devices written in place, modes kept. Runs in a fresh folder under the current one.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, symlink, link, mkfifo */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outfile.h"
#include "support/testlib.h"

static char dir[64];

static const char *at(const char *name)
{
    static char bufs[8][256];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, 256, "%s/%s", dir, name);
    return b;
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* The file's content, "" when it cannot be read ("(missing)" when it does not exist). */
static const char *get(const char *path)
{
    static char buf[256];
    FILE *f = fopen(path, "r");
    if (!f) return "(missing)";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* No temporary or backup file left in the folder. */
static int leftovers(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".qmoe-") != NULL;
    if (d) closedir(d);
    return n;
}

static int write_text(const char *path, void *ctx, char *err)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(ctx, f) < 0 || fclose(f)) {
        snprintf(err, OUTFILE_ERR_LEN, "cannot write");
        return -1;
    }
    return 0;
}

static int write_fails(const char *path, void *ctx, char *err)
{
    (void)path, (void)ctx;
    snprintf(err, OUTFILE_ERR_LEN, "the writer failed on purpose");
    return -1;
}

/* A set of outputs with texts; check only (0), or check and write. */
static int run(const char *const *paths, const char *const *texts, int n, const char *input,
               char *err)
{
    outfiles s;
    outfiles_init(&s);
    if (input) outfiles_input(&s, "--x", input);
    for (int i = 0; i < n; i++) {
        outfile *o = outfiles_output(&s, i ? "--out-scale" : "--out", paths[i]);
        o->write = texts[i] ? write_text : write_fails;
        o->ctx = (void *)texts[i];
    }
    int rc = outfiles_check(&s, err) || outfiles_write(&s, err) ? -1 : 0;
    outfiles_free(&s);
    return rc;
}

static int rename_calls, fail_rename_at;

static int flaky_rename(const char *from, const char *to)
{
    if (++rename_calls == fail_rename_at) {
        errno = EXDEV;
        return -1;
    }
    return rename(from, to);
}

static void test_commit(void)
{
    char err[OUTFILE_ERR_LEN];
    const char *ab[2] = {at("a"), at("b")};
    CHECK_MSG(run(ab, (const char *[]){"A1", "B1"}, 2, NULL, err) == 0, "%s", err);
    CHECK(!strcmp(get(ab[0]), "A1") && !strcmp(get(ab[1]), "B1") && leftovers() == 0);

    /* the second output fails while staging: the first keeps its old bytes */
    CHECK(run(ab, (const char *[]){"A2", NULL}, 2, NULL, err) == -1);
    CHECK_MSG(strstr(err, "on purpose") && strstr(err, ab[1]), "%s", err);
    CHECK(!strcmp(get(ab[0]), "A1") && !strcmp(get(ab[1]), "B1") && leftovers() == 0);

    /* a rename fails after others succeeded: the renamed ones are rolled back, a new file is
     * removed again, every old file has its old bytes */
    const char *cab[3] = {at("c"), at("a"), at("b")};
    outfile_rename = flaky_rename;
    for (int k = 1; k <= 3; k++) {
        rename_calls = 0;
        fail_rename_at = k;
        CHECK(run(cab, (const char *[]){"C3", "A3", "B3"}, 3, NULL, err) == -1);
        CHECK_MSG(strstr(err, "into place"), "%s", err);
        CHECK_MSG(!strcmp(get(cab[0]), "(missing)") && !strcmp(get(cab[1]), "A1") &&
                      !strcmp(get(cab[2]), "B1"),
                  "rename %d failed: c=%s", k, get(cab[0]));
        CHECK(leftovers() == 0);
    }
    outfile_rename = rename;
    CHECK(run(cab, (const char *[]){"C3", "A3", "B3"}, 3, NULL, err) == 0);
    CHECK(!strcmp(get(cab[0]), "C3") && !strcmp(get(cab[1]), "A3") && !strcmp(get(cab[2]), "B3"));

    /* the old file's mode is kept */
    CHECK(chmod(ab[0], 0640) == 0);
    CHECK(run(ab, (const char *[]){"A4", "B4"}, 2, NULL, err) == 0);
    struct stat st;
    CHECK(stat(ab[0], &st) == 0 && (st.st_mode & 07777) == 0640);
}

static void test_same_file(void)
{
    char err[OUTFILE_ERR_LEN];
    CHECK(mkdir(at("op"), 0777) == 0);
    /* one new file, two spellings */
    CHECK(run((const char *[]){at("op/q"), at("op/./q")}, (const char *[]){"1", "2"}, 2, NULL,
              err) == -1);
    CHECK_MSG(strstr(err, "same file as --out"), "%s", err);
    CHECK(!strcmp(get(at("op/q")), "(missing)"));
    /* an existing file through a symlinked folder and a hard link */
    put(at("op/r"), "R");
    CHECK(symlink("op", at("op_link")) == 0 && link(at("op/r"), at("r_hard")) == 0);
    CHECK(run((const char *[]){at("op/r"), at("op_link/r")}, (const char *[]){"1", "2"}, 2, NULL,
              err) == -1);
    CHECK(run((const char *[]){at("r_hard"), at("other")}, (const char *[]){"1", "2"}, 2,
              at("op/r"), err) == -1);
    CHECK_MSG(strstr(err, "the --x input"), "%s", err);
    CHECK(!strcmp(get(at("op/r")), "R") && !strcmp(get(at("other")), "(missing)"));
    /* a folder is not an output */
    CHECK(run((const char *[]){at("op")}, (const char *[]){"1"}, 1, NULL, err) == -1);
    CHECK_MSG(strstr(err, "is a folder"), "%s", err);
    /* a character device may be named twice: writing it destroys nothing */
    CHECK_MSG(run((const char *[]){"/dev/null", "/dev/null"}, (const char *[]){"1", "2"}, 2,
                  "/dev/null", err) == 0, "%s", err);
}

static void test_links_and_pipes(void)
{
    char err[OUTFILE_ERR_LEN];
    struct stat st;
    /* a link to a file: the file gets the bytes, the link stays a link */
    put(at("target"), "old");
    CHECK(symlink("target", at("link")) == 0);
    CHECK_MSG(run((const char *[]){at("link")}, (const char *[]){"new"}, 1, NULL, err) == 0, "%s",
              err);
    CHECK(lstat(at("link"), &st) == 0 && S_ISLNK(st.st_mode) && !strcmp(get(at("target")), "new"));
    /* a dangling link: the file it names is created */
    CHECK(symlink("made", at("dangling")) == 0);
    CHECK(run((const char *[]){at("dangling")}, (const char *[]){"made"}, 1, NULL, err) == 0);
    CHECK(lstat(at("dangling"), &st) == 0 && S_ISLNK(st.st_mode) && !strcmp(get(at("made")), "made"));
    /* a named pipe is written in place and stays a pipe (a reader is open, so no blocking) */
    CHECK(mkfifo(at("fifo"), 0600) == 0);
    int rd = open(at("fifo"), O_RDONLY | O_NONBLOCK);
    CHECK(rd >= 0);
    CHECK_MSG(run((const char *[]){at("fifo"), at("beside")}, (const char *[]){"piped", "B"}, 2,
                  NULL, err) == 0, "%s", err);
    char buf[16] = {0};
    CHECK(read(rd, buf, sizeof buf - 1) == 5 && !strcmp(buf, "piped"));
    close(rd);
    CHECK(lstat(at("fifo"), &st) == 0 && S_ISFIFO(st.st_mode) && leftovers() == 0);
}

int main(void)
{
    snprintf(dir, sizeof dir, "outfile_test.XXXXXX");
    if (!mkdtemp(dir)) return qt_skip("cli_outfile", "cannot make a folder here");
    test_commit();
    test_same_file();
    test_links_and_pipes();
    int rc = qt_finish("cli_outfile");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (!rc && system(cmd) != 0) rc = 1;
    return rc;
}
