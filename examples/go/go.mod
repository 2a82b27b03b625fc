module github.com/kvtier/kvtier/examples/go

go 1.19

require github.com/kvtier/kvtier/bindings/go v0.1.0

// Builds against the binding in this checkout. A program of your own uses a released
// version instead (go get github.com/kvtier/kvtier/bindings/go@v0.1.0), or replaces it with
// the Debian package's copy:
//   replace github.com/kvtier/kvtier/bindings/go => /usr/share/gocode/src/github.com/kvtier/kvtier/bindings/go
replace github.com/kvtier/kvtier/bindings/go => ../../bindings/go
