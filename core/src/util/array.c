#include "util/array.h"

#include <stdint.h>
#include <stdlib.h>

void *array_grow(void *items, size_t *capacity, size_t count, size_t elem_size, size_t first)
{
	if (count < *capacity)
		return items;
	size_t cap = *capacity ? *capacity * 2 : first;
	if (cap < *capacity || elem_size == 0 || cap > SIZE_MAX / elem_size)
		return NULL;
	void *grown = realloc(items, cap * elem_size);
	if (grown != NULL)
		*capacity = cap;
	return grown;
}
