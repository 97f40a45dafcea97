/*
 * hashmap.c - an open-addressing hash map from strings to integers,
 * used here to count word frequencies in a text read from stdin.
 *
 * Keys are copied into the map.  Deleted slots are marked with tombstones so
 * that probing sequences stay intact; the table grows when it is 70% full.
 */

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HM_INITIAL_CAPACITY 16
#define HM_MAX_LOAD 0.70

typedef enum { SLOT_EMPTY = 0, SLOT_USED, SLOT_DELETED } slot_state;

typedef struct {
    char *key;
    long value;
    uint32_t hash;
    slot_state state;
} hm_slot;

typedef struct {
    hm_slot *slots;
    size_t capacity;
    size_t count;      /* live entries */
    size_t tombstones; /* deleted entries still occupying slots */
} hashmap;

/* FNV-1a, 32-bit. */
static uint32_t hm_hash(const char *key)
{
    uint32_t hash = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        hash ^= *p;
        hash *= 16777619u;
    }
    return hash;
}

static char *hm_strdup(const char *s)
{
    size_t len = strlen(s) + 1;
    char *copy = malloc(len);
    if (copy != NULL) {
        memcpy(copy, s, len);
    }
    return copy;
}

int hm_init(hashmap *map, size_t capacity)
{
    if (capacity < HM_INITIAL_CAPACITY) {
        capacity = HM_INITIAL_CAPACITY;
    }
    map->slots = calloc(capacity, sizeof(hm_slot));
    if (map->slots == NULL) {
        return -1;
    }
    map->capacity = capacity;
    map->count = 0;
    map->tombstones = 0;
    return 0;
}

void hm_free(hashmap *map)
{
    for (size_t i = 0; i < map->capacity; i++) {
        if (map->slots[i].state == SLOT_USED) {
            free(map->slots[i].key);
        }
    }
    free(map->slots);
    map->slots = NULL;
    map->capacity = map->count = map->tombstones = 0;
}

/* Return the slot holding key, or the slot where it should be inserted. */
static hm_slot *hm_find_slot(hm_slot *slots, size_t capacity, const char *key, uint32_t hash)
{
    size_t index = hash & (capacity - 1);
    hm_slot *first_tombstone = NULL;
    for (;;) {
        hm_slot *slot = &slots[index];
        if (slot->state == SLOT_EMPTY) {
            return first_tombstone != NULL ? first_tombstone : slot;
        }
        if (slot->state == SLOT_DELETED) {
            if (first_tombstone == NULL) {
                first_tombstone = slot;
            }
        } else if (slot->hash == hash && strcmp(slot->key, key) == 0) {
            return slot;
        }
        index = (index + 1) & (capacity - 1);
    }
}

static int hm_grow(hashmap *map)
{
    size_t new_capacity = map->capacity * 2;
    hm_slot *new_slots = calloc(new_capacity, sizeof(hm_slot));
    if (new_slots == NULL) {
        return -1;
    }
    for (size_t i = 0; i < map->capacity; i++) {
        hm_slot *old = &map->slots[i];
        if (old->state != SLOT_USED) {
            continue;
        }
        hm_slot *dest = hm_find_slot(new_slots, new_capacity, old->key, old->hash);
        *dest = *old;
    }
    free(map->slots);
    map->slots = new_slots;
    map->capacity = new_capacity;
    map->tombstones = 0;
    return 0;
}

/* Insert or overwrite. Returns 0 on success, -1 when out of memory. */
int hm_put(hashmap *map, const char *key, long value)
{
    if ((double)(map->count + map->tombstones + 1) > map->capacity * HM_MAX_LOAD) {
        if (hm_grow(map) != 0) {
            return -1;
        }
    }
    uint32_t hash = hm_hash(key);
    hm_slot *slot = hm_find_slot(map->slots, map->capacity, key, hash);
    if (slot->state == SLOT_USED) {
        slot->value = value;
        return 0;
    }
    char *copy = hm_strdup(key);
    if (copy == NULL) {
        return -1;
    }
    if (slot->state == SLOT_DELETED) {
        map->tombstones--;
    }
    slot->key = copy;
    slot->value = value;
    slot->hash = hash;
    slot->state = SLOT_USED;
    map->count++;
    return 0;
}

/* Look up key; stores the value in *out and returns 1 if found, else 0. */
int hm_get(const hashmap *map, const char *key, long *out)
{
    hm_slot *slot = hm_find_slot(map->slots, map->capacity, key, hm_hash(key));
    if (slot->state != SLOT_USED) {
        return 0;
    }
    if (out != NULL) {
        *out = slot->value;
    }
    return 1;
}

int hm_remove(hashmap *map, const char *key)
{
    hm_slot *slot = hm_find_slot(map->slots, map->capacity, key, hm_hash(key));
    if (slot->state != SLOT_USED) {
        return 0;
    }
    free(slot->key);
    slot->key = NULL;
    slot->state = SLOT_DELETED;
    map->count--;
    map->tombstones++;
    return 1;
}

static int compare_by_count(const void *a, const void *b)
{
    const hm_slot *x = *(const hm_slot *const *)a;
    const hm_slot *y = *(const hm_slot *const *)b;
    if (x->value != y->value) {
        return x->value < y->value ? 1 : -1;
    }
    return strcmp(x->key, y->key);
}

int main(int argc, char **argv)
{
    int top = argc > 1 ? atoi(argv[1]) : 10;
    hashmap words;
    if (hm_init(&words, 64) != 0) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    char word[128];
    size_t len = 0;
    for (;;) {
        int ch = getchar();
        if (ch != EOF && (isalpha(ch) || (ch == '\'' && len > 0))) {
            if (len + 1 < sizeof(word)) {
                word[len++] = (char)tolower(ch);
            }
            continue;
        }
        if (len > 0) {
            word[len] = '\0';
            long count = 0;
            hm_get(&words, word, &count);
            if (hm_put(&words, word, count + 1) != 0) {
                fprintf(stderr, "out of memory\n");
                hm_free(&words);
                return 1;
            }
            len = 0;
        }
        if (ch == EOF) {
            break;
        }
    }
    hm_slot **sorted = malloc(words.count * sizeof(*sorted) + 1);
    size_t n = 0;
    for (size_t i = 0; sorted != NULL && i < words.capacity; i++) {
        if (words.slots[i].state == SLOT_USED) {
            sorted[n++] = &words.slots[i];
        }
    }
    if (sorted != NULL) {
        qsort(sorted, n, sizeof(*sorted), compare_by_count);
        for (size_t i = 0; i < n && (int)i < top; i++) {
            printf("%7ld  %s\n", sorted[i]->value, sorted[i]->key);
        }
    }
    free(sorted);
    hm_free(&words);
    return 0;
}
