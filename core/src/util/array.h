/*
 * util/array.h — growing an array one element at a time, doubling its
 * capacity, as the core's lists (files of a tree, actions of a review,
 * applications of a catalog) do.
 */
#ifndef RELAY_UTIL_ARRAY_H
#define RELAY_UTIL_ARRAY_H

#include <stddef.h>

/* Room for one more element in `items`, an array of `count` used and
 * *capacity allocated elements of `elem_size` bytes: `items` itself while
 * count < *capacity, else `items` reallocated to twice the capacity
 * (`first` elements when it has none) with *capacity updated. NULL when
 * out of memory, `items` and *capacity then untouched (still the caller's). */
void *array_grow(void *items, size_t *capacity, size_t count, size_t elem_size, size_t first);

#endif
