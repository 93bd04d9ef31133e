// The generic `example:types` component (tests/generic/wit/types.wit) in C
// against the `wit-bindgen c` bindings: no Wharf SDK, plain WIT exports.
//
// Every function behaves exactly as the WIT doc comments say; the Rust,
// JavaScript and Python versions do the same (tests/all/generic_langs.rs
// compares them). Ownership follows wit-bindgen's C convention: arguments
// belong to the callee (freed or handed back here), results are malloc'ed
// and freed by the generated post-return functions.

#include <stdlib.h>
#include <string.h>

#include "types.h"

// Lists and strings are heap buffers; an empty one may be any pointer.
static void *alloc_or_die(size_t n) {
  void *p = malloc(n == 0 ? 1 : n);
  if (p == NULL) {
    abort();
  }
  return p;
}

void exports_types_greet(types_string_t *name, types_string_t *ret) {
  static const char pre[] = "Hello, ";
  size_t n = sizeof(pre) - 1;
  ret->len = n + name->len + 1;
  ret->ptr = alloc_or_die(ret->len);
  memcpy(ret->ptr, pre, n);
  if (name->len > 0) {
    memcpy(ret->ptr + n, name->ptr, name->len);
  }
  ret->ptr[ret->len - 1] = '!';
  types_string_free(name);
}

int32_t exports_example_types_kinds_add(int32_t a, int32_t b) {
  // Wrapping: unsigned arithmetic is defined on overflow.
  return (int32_t)((uint32_t)a + (uint32_t)b);
}

void exports_example_types_kinds_ints(uint8_t a, int8_t b, uint16_t c, int16_t d, uint32_t e, int32_t f, uint64_t g,
                                      int64_t h, types_tuple8_u8_s8_u16_s16_u32_s32_u64_s64_t *ret) {
  ret->f0 = a;
  ret->f1 = b;
  ret->f2 = c;
  ret->f3 = d;
  ret->f4 = e;
  ret->f5 = f;
  ret->f6 = g;
  ret->f7 = h;
}

double exports_example_types_kinds_floats(float a, double b) { return (double)a + b; }

uint32_t exports_example_types_kinds_next_char(uint32_t c) {
  if (c == 0xD7FF) {
    return 0xE000;
  }
  if (c == 0x10FFFF) {
    return 0;
  }
  return c + 1;
}

void exports_example_types_kinds_shout(types_string_t *s, types_string_t *ret) {
  // ASCII bytes only: the bytes of other characters (UTF-8 lead and
  // continuation bytes are all >= 0x80) are left as they are.
  ret->len = s->len + 1;
  ret->ptr = alloc_or_die(ret->len);
  for (size_t i = 0; i < s->len; i++) {
    uint8_t ch = s->ptr[i];
    ret->ptr[i] = (ch >= 'a' && ch <= 'z') ? (uint8_t)(ch - 'a' + 'A') : ch;
  }
  ret->ptr[s->len] = '!';
  types_string_free(s);
}

void exports_example_types_kinds_reverse_bytes(types_list_u8_t *data, types_list_u8_t *ret) {
  // Reversed in place; the argument's buffer becomes the result.
  for (size_t i = 0, j = data->len; i + 1 < j; i++, j--) {
    uint8_t t = data->ptr[i];
    data->ptr[i] = data->ptr[j - 1];
    data->ptr[j - 1] = t;
  }
  *ret = *data;
}

int64_t exports_example_types_kinds_sum(types_list_s64_t *xs) {
  uint64_t acc = 0;
  for (size_t i = 0; i < xs->len; i++) {
    acc += (uint64_t)xs->ptr[i];
  }
  types_list_s64_free(xs);
  return (int64_t)acc;
}

void exports_example_types_kinds_mid(exports_example_types_kinds_point_t *a, exports_example_types_kinds_point_t *b,
                                     exports_example_types_kinds_point_t *ret) {
  ret->x = (a->x + b->x) / 2;
  ret->y = (a->y + b->y) / 2;
  // The label moves into the result; the other one is freed.
  if (a->label.is_some) {
    ret->label = a->label;
    types_option_string_free(&b->label);
  } else {
    ret->label = b->label;
  }
}

void exports_example_types_kinds_swap(types_tuple2_string_u32_t *t, types_tuple2_u32_string_t *ret) {
  ret->f0 = t->f1;
  ret->f1 = t->f0;
}

double exports_example_types_kinds_area(exports_example_types_kinds_shape_t *s) {
  double area = 0;
  switch (s->tag) {
  case EXPORTS_EXAMPLE_TYPES_KINDS_SHAPE_CIRCLE:
    area = 3.141592653589793 * s->val.circle * s->val.circle;
    break;
  case EXPORTS_EXAMPLE_TYPES_KINDS_SHAPE_RECT:
    area = s->val.rect.x * s->val.rect.y;
    break;
  default:
    break;
  }
  exports_example_types_kinds_shape_free(s);
  return area;
}

exports_example_types_kinds_color_t exports_example_types_kinds_rotate(exports_example_types_kinds_color_t c) {
  switch (c) {
  case EXPORTS_EXAMPLE_TYPES_KINDS_COLOR_RED:
    return EXPORTS_EXAMPLE_TYPES_KINDS_COLOR_GREEN;
  case EXPORTS_EXAMPLE_TYPES_KINDS_COLOR_GREEN:
    return EXPORTS_EXAMPLE_TYPES_KINDS_COLOR_BLUE;
  default:
    return EXPORTS_EXAMPLE_TYPES_KINDS_COLOR_RED;
  }
}

exports_example_types_kinds_perms_t exports_example_types_kinds_toggle(exports_example_types_kinds_perms_t p) {
  const exports_example_types_kinds_perms_t every = EXPORTS_EXAMPLE_TYPES_KINDS_PERMS_READ |
                                                    EXPORTS_EXAMPLE_TYPES_KINDS_PERMS_WRITE |
                                                    EXPORTS_EXAMPLE_TYPES_KINDS_PERMS_EXEC;
  return (exports_example_types_kinds_perms_t)(~p & every);
}

bool exports_example_types_kinds_double(uint32_t *maybe_x, uint32_t *ret) {
  if (maybe_x == NULL) {
    return false;
  }
  *ret = *maybe_x * 2u;
  return true;
}

static void set_err(types_string_t *err, const char *msg) {
  size_t n = strlen(msg);
  err->ptr = alloc_or_die(n);
  memcpy(err->ptr, msg, n);
  err->len = n;
}

bool exports_example_types_kinds_divide(int32_t a, int32_t b, int32_t *ret, types_string_t *err) {
  if (b == 0) {
    set_err(err, "division by zero");
    return false;
  }
  if (a == INT32_MIN && b == -1) {
    set_err(err, "overflow");
    return false;
  }
  *ret = a / b;
  return true;
}
