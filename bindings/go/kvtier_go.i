/* Go typemaps for kvtier.i: token arrays and scalar outs become slices passed without a
 * copy (cgo allows it: they hold no Go pointers), byte buffers become []byte. An empty
 * slice passes NULL, as the C API allows for buf_len 0. */
%define KVT_GO_SLICE(CTYPE, GOTYPE)
%typemap(gotype) CTYPE %{[]GOTYPE%}
%typemap(in) CTYPE %{ $1 = ($1_ltype)($input.len > 0 ? $input.array : 0); %}
%typemap(out) CTYPE ""
%typemap(goout) CTYPE ""
%typemap(freearg) CTYPE ""
%typemap(argout) CTYPE ""
%enddef

/* Keep const char* a Go string: the char* buffer typemap below would otherwise match it. */
%apply char* { const char* };
%typemap(freearg) const char* %{ free($1); %}

/* UTF-8 text with its length: one Go string, passed without a copy (the C API copies). */
%apply (char *STRING, size_t LENGTH) { (const char* text, int32_t text_len) };

KVT_GO_SLICE(const int32_t*, int32)
KVT_GO_SLICE(int32_t*, int32)
KVT_GO_SLICE(int64_t*, int64)
KVT_GO_SLICE(char*, byte)
KVT_GO_SLICE(const float*, float32)
KVT_GO_SLICE(float*, float32)

/* Link the generated package against libkvtier; -I/-L come from CGO_CFLAGS/CGO_LDFLAGS
 * (or the system paths once libkvtier-dev is installed). */
%insert(cgo_comment_typedefs) %{
#cgo LDFLAGS: -lkvtier
%}
