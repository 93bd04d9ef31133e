// {{name}}: a generic component in C. `wharf plugin build` generates
// target/c/bindings/component.h from wit/world.wit (`wit-bindgen c`).
//
// wit-bindgen's C conventions: a string is {ptr, len} (UTF-8, not
// NUL-terminated); arguments passed by pointer belong to the function (free
// them); results are malloc'ed and freed by the bindings after the call; an
// `option<u32>` argument is a pointer (NULL for none); a `result` is the
// return value (true: ok in *ret, false: err in *err).

#include <stdlib.h>
#include <string.h>

#include "component.h"

static void set_str(component_string_t *out, const char *s) {
  size_t n = strlen(s);
  out->ptr = malloc(n);
  if (out->ptr == NULL) {
    abort();
  }
  memcpy(out->ptr, s, n);
  out->len = n;
}

bool exports_component_{{c_name}}(component_string_t *name, uint32_t *maybe_times, component_string_t *ret,
                      component_string_t *err) {
  uint32_t times = maybe_times == NULL ? 1 : *maybe_times;
  if (times < 1 || times > 10) {
    component_string_free(name);
    set_str(err, "`times` must be between 1 and 10");
    return false;
  }
  // "Hello, NAME!" `times` times, joined by newlines.
  static const char pre[] = "Hello, ";
  size_t line = sizeof(pre) - 1 + name->len + 1;
  ret->len = line * times + (times - 1);
  ret->ptr = malloc(ret->len);
  if (ret->ptr == NULL) {
    abort();
  }
  uint8_t *p = ret->ptr;
  for (uint32_t i = 0; i < times; i++) {
    if (i > 0) {
      *p++ = '\n';
    }
    memcpy(p, pre, sizeof(pre) - 1);
    p += sizeof(pre) - 1;
    if (name->len > 0) {
      memcpy(p, name->ptr, name->len);
      p += name->len;
    }
    *p++ = '!';
  }
  component_string_free(name);
  return true;
}
