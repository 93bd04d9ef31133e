// wharf_questions.h: ask the session's user a question from a C component
// (the optional import `wharf:plugin/questions@0.1.0`; the operator grants
// `questions = true`). Header-only, over the bindings `wit-bindgen c`
// generates for your world.
//
// 1. Put Wharf's WIT package (`wit/since_v0.1.0` of a Wharf checkout, or
//    `share/wharf/wit/since_v0.1.0` of an install) in `wit/deps/wharf-plugin/`
//    and import the interface in your world:
//
//        world component {
//          import wharf:plugin/questions@0.1.0;
//          export ask-me: func() -> result<string, string>;
//        }
//
// 2. Copy this file next to your sources and include it after the bindings,
//    naming your world (snake case) first:
//
//        #include "component.h"
//        #define WHARF_WORLD component
//        #include "wharf_questions.h"
//
// 3. Ask (the schema is a JSON Schema object of at most 16 flat string /
//    number / integer / boolean fields, asked in the text's order):
//
//        wharf_answer_t a = wharf_ask_text("Which branch?",
//            "{\"type\":\"object\",\"properties\":{\"branch\":{\"type\":\"string\"}},\"required\":[\"branch\"]}");
//        if (a.kind == WHARF_ANSWER_ACCEPT) { ... a.values_json ... }
//        wharf_answer_free(&a);
//
// `accept` carries the fields as a NUL-terminated JSON object (checked
// against the form by the host); `decline` means the user said no (`wharf
// run` declines every question); `cancel` that nobody answered (withdrawn,
// the turn cancelled, a policy's deadline). An error (`not-granted`,
// `invalid` for a form outside the host's bounds, `no-session`, ...) is
// `WHARF_ANSWER_ERROR` with `error` saying which. A tool's question ends
// with its call's deadline.

#ifndef WHARF_QUESTIONS_H
#define WHARF_QUESTIONS_H

#include <stdlib.h>
#include <string.h>

#ifndef WHARF_WORLD
#error "define WHARF_WORLD as your world's name in snake case (e.g. component) before including wharf_questions.h"
#endif

#define WHARF__CAT2(a, b) a##b
#define WHARF__CAT(a, b) WHARF__CAT2(a, b)
#define WHARF__STRING_T WHARF__CAT(WHARF_WORLD, _string_t)
#define WHARF__STRING_SET WHARF__CAT(WHARF_WORLD, _string_set)
#define WHARF__STRING_FREE WHARF__CAT(WHARF_WORLD, _string_free)

/// How the user answered, or that the question could not be asked.
typedef enum {
  WHARF_ANSWER_ACCEPT,
  WHARF_ANSWER_DECLINE,
  WHARF_ANSWER_CANCEL,
  WHARF_ANSWER_ERROR,
} wharf_answer_kind_t;

/// An answer; free it with `wharf_answer_free`.
typedef struct {
  wharf_answer_kind_t kind;
  /// ACCEPT: the fields as a JSON object, NUL-terminated (else NULL).
  char *values_json;
  /// ERROR: `no-session`, `not-granted: questions`, `invalid: why`,
  /// `failed: why` or `cancelled`, NUL-terminated (else NULL).
  char *error;
} wharf_answer_t;

static inline char *wharf__cstr(const void *ptr, size_t len) {
  char *s = (char *)malloc(len + 1);
  if (s == NULL) {
    abort();
  }
  if (len > 0) {
    memcpy(s, ptr, len);
  }
  s[len] = '\0';
  return s;
}

static inline char *wharf__error(const char *kind, WHARF__STRING_T *why) {
  size_t k = strlen(kind);
  size_t n = why == NULL ? 0 : why->len;
  char *s = (char *)malloc(k + (n > 0 ? 2 + n : 0) + 1);
  if (s == NULL) {
    abort();
  }
  memcpy(s, kind, k);
  if (n > 0) {
    memcpy(s + k, ": ", 2);
    memcpy(s + k + 2, why->ptr, n);
    k += 2 + n;
  }
  s[k] = '\0';
  return s;
}

/// Asks `message` with the form `schema_json` (JSON text) and waits for the
/// answer. Both strings are only read.
static inline wharf_answer_t wharf_ask_text(const char *message, const char *schema_json) {
  WHARF__STRING_T m, s;
  WHARF__STRING_SET(&m, message);
  WHARF__STRING_SET(&s, schema_json);
  wharf_plugin_questions_answer_t ret;
  wharf_plugin_questions_session_error_t err;
  wharf_answer_t out = {WHARF_ANSWER_ERROR, NULL, NULL};
  if (!wharf_plugin_questions_ask(&m, &s, &ret, &err)) {
    switch (err.tag) {
      case WHARF_PLUGIN_SESSION_SESSION_ERROR_NO_SESSION:
        out.error = wharf__error("no-session", NULL);
        break;
      case WHARF_PLUGIN_SESSION_SESSION_ERROR_NOT_GRANTED:
        out.error = wharf__error("not-granted", &err.val.not_granted);
        WHARF__STRING_FREE(&err.val.not_granted);
        break;
      case WHARF_PLUGIN_SESSION_SESSION_ERROR_INVALID:
        out.error = wharf__error("invalid", &err.val.invalid);
        WHARF__STRING_FREE(&err.val.invalid);
        break;
      case WHARF_PLUGIN_SESSION_SESSION_ERROR_FAILED:
        out.error = wharf__error("failed", &err.val.failed);
        WHARF__STRING_FREE(&err.val.failed);
        break;
      default:
        out.error = wharf__error("cancelled", NULL);
        break;
    }
    return out;
  }
  switch (ret.tag) {
    case WHARF_PLUGIN_QUESTIONS_ANSWER_ACCEPT:
      out.kind = WHARF_ANSWER_ACCEPT;
      out.values_json = wharf__cstr(ret.val.accept.ptr, ret.val.accept.len);
      WHARF__STRING_FREE(&ret.val.accept);
      break;
    case WHARF_PLUGIN_QUESTIONS_ANSWER_DECLINE:
      out.kind = WHARF_ANSWER_DECLINE;
      break;
    default:
      out.kind = WHARF_ANSWER_CANCEL;
      break;
  }
  return out;
}

/// Frees what an answer holds.
static inline void wharf_answer_free(wharf_answer_t *a) {
  free(a->values_json);
  free(a->error);
  a->values_json = NULL;
  a->error = NULL;
}

#endif
