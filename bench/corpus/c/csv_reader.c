/*
 * csv_reader.c - a small RFC 4180 style CSV reader.
 *
 * Handles quoted fields, doubled quotes inside quotes, embedded newlines and
 * both LF and CRLF line endings.  The demo program reads a CSV file and prints
 * the sum and mean of one numeric column.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char **fields;
    size_t count;
    size_t capacity;
} csv_row;

typedef struct {
    FILE *in;
    char delimiter;
    long line;   /* current physical line, for error messages */
    char *buf;   /* scratch buffer for the field being read */
    size_t buf_len;
    size_t buf_cap;
} csv_reader;

typedef enum {
    CSV_OK = 0,
    CSV_EOF,
    CSV_ERR_MEMORY,
    CSV_ERR_QUOTE,
} csv_status;

static const char *csv_status_text(csv_status status)
{
    switch (status) {
    case CSV_OK: return "ok";
    case CSV_EOF: return "end of file";
    case CSV_ERR_MEMORY: return "out of memory";
    case CSV_ERR_QUOTE: return "unterminated quoted field";
    }
    return "unknown error";
}

static int buf_push(csv_reader *r, char c)
{
    if (r->buf_len + 1 >= r->buf_cap) {
        size_t new_cap = r->buf_cap ? r->buf_cap * 2 : 64;
        char *grown = realloc(r->buf, new_cap);
        if (grown == NULL) {
            return -1;
        }
        r->buf = grown;
        r->buf_cap = new_cap;
    }
    r->buf[r->buf_len++] = c;
    return 0;
}

static int row_push(csv_row *row, const char *text, size_t len)
{
    if (row->count == row->capacity) {
        size_t new_cap = row->capacity ? row->capacity * 2 : 8;
        char **grown = realloc(row->fields, new_cap * sizeof(*grown));
        if (grown == NULL) {
            return -1;
        }
        row->fields = grown;
        row->capacity = new_cap;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL) {
        return -1;
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    row->fields[row->count++] = copy;
    return 0;
}

void csv_row_clear(csv_row *row)
{
    for (size_t i = 0; i < row->count; i++) {
        free(row->fields[i]);
    }
    row->count = 0;
}

void csv_row_free(csv_row *row)
{
    csv_row_clear(row);
    free(row->fields);
    row->fields = NULL;
    row->capacity = 0;
}

void csv_reader_init(csv_reader *r, FILE *in, char delimiter)
{
    memset(r, 0, sizeof(*r));
    r->in = in;
    r->delimiter = delimiter;
    r->line = 1;
}

/* Read the next record into row (which is cleared first). */
csv_status csv_read_row(csv_reader *r, csv_row *row)
{
    int in_quotes = 0;
    int c = getc(r->in);

    csv_row_clear(row);
    if (c == EOF) {
        return CSV_EOF;
    }
    r->buf_len = 0;
    for (;; c = getc(r->in)) {
        if (in_quotes) {
            if (c == EOF) {
                return CSV_ERR_QUOTE;
            }
            if (c == '"') {
                int next = getc(r->in);
                if (next == '"') {
                    if (buf_push(r, '"') != 0) return CSV_ERR_MEMORY;
                    continue;
                }
                in_quotes = 0;
                ungetc(next, r->in);
                continue;
            }
            if (c == '\n') {
                r->line++;
            }
            if (buf_push(r, (char)c) != 0) return CSV_ERR_MEMORY;
            continue;
        }
        if (c == '"' && r->buf_len == 0) {
            in_quotes = 1;
        } else if (c == r->delimiter || c == '\n' || c == EOF) {
            if (row_push(row, r->buf ? r->buf : "", r->buf_len) != 0) {
                return CSV_ERR_MEMORY;
            }
            r->buf_len = 0;
            if (c == '\n') {
                r->line++;
                return CSV_OK;
            }
            if (c == EOF) {
                return CSV_OK;
            }
        } else if (c == '\r') {
            /* Ignore the CR of a CRLF line ending. */
        } else if (buf_push(r, (char)c) != 0) {
            return CSV_ERR_MEMORY;
        }
    }
}

static int find_column(const csv_row *header, const char *name)
{
    for (size_t i = 0; i < header->count; i++) {
        if (strcmp(header->fields[i], name) == 0) {
            return (int)i;
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s FILE.csv COLUMN\n", argv[0]);
        return 2;
    }
    FILE *in = fopen(argv[1], "r");
    if (in == NULL) {
        fprintf(stderr, "%s: %s\n", argv[1], strerror(errno));
        return 1;
    }

    csv_reader reader;
    csv_row row = {0};
    csv_reader_init(&reader, in, ',');
    csv_status status = csv_read_row(&reader, &row);
    int column = status == CSV_OK ? find_column(&row, argv[2]) : -1;
    if (column < 0) {
        fprintf(stderr, "column '%s' not found in header\n", argv[2]);
        csv_row_free(&row);
        fclose(in);
        return 1;
    }

    double sum = 0.0;
    long rows = 0, skipped = 0;
    while ((status = csv_read_row(&reader, &row)) == CSV_OK) {
        if ((size_t)column >= row.count) {
            skipped++;
            continue;
        }
        char *end = NULL;
        double value = strtod(row.fields[column], &end);
        if (end == row.fields[column] || *end != '\0') {
            skipped++;
            continue;
        }
        sum += value;
        rows++;
    }
    if (status != CSV_EOF) {
        fprintf(stderr, "%s:%ld: %s\n", argv[1], reader.line, csv_status_text(status));
    }
    printf("rows=%ld skipped=%ld sum=%.3f mean=%.3f\n",
           rows, skipped, sum, rows > 0 ? sum / (double)rows : 0.0);

    csv_row_free(&row);
    free(reader.buf);
    fclose(in);
    return status == CSV_EOF ? 0 : 1;
}
