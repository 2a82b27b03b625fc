// The package's documentation as `go doc` and pkg.go.dev show it: every exported
// identifier has a doc comment, and the Example functions cover the main entry points.
package kvtier

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"sort"
	"strings"
	"testing"
)

func parsePackage(t *testing.T, tests bool) (*token.FileSet, map[string]*ast.Package) {
	t.Helper()
	fset := token.NewFileSet()
	keep := func(fi fs.FileInfo) bool { return strings.HasSuffix(fi.Name(), "_test.go") == tests }
	pkgs, err := parser.ParseDir(fset, ".", keep, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	return fset, pkgs
}

func TestEveryExportedIdentifierIsDocumented(t *testing.T) {
	_, pkgs := parsePackage(t, false)
	p := doc.New(pkgs["kvtier"], "github.com/kvtier/kvtier/bindings/go", 0)
	var missing []string
	need := func(name, text string) {
		if strings.TrimSpace(text) == "" {
			missing = append(missing, name)
		}
	}
	need("package kvtier", p.Doc)
	values := func(owner string, vs []*doc.Value) {
		for _, v := range vs {
			need(owner+strings.Join(v.Names, ", "), v.Doc)
		}
	}
	values("", p.Consts)
	values("", p.Vars)
	for _, f := range p.Funcs {
		need(f.Name, f.Doc)
	}
	for _, typ := range p.Types {
		need(typ.Name, typ.Doc)
		values(typ.Name+" ", typ.Consts)
		values(typ.Name+" ", typ.Vars)
		for _, f := range typ.Funcs {
			need(f.Name, f.Doc)
		}
		for _, m := range typ.Methods {
			need(typ.Name+"."+m.Name, m.Doc)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("exported identifiers without a doc comment:\n  %s", strings.Join(missing, "\n  "))
	}
}

func TestExamplesCoverTheEntryPoints(t *testing.T) {
	_, pkgs := parsePackage(t, true)
	var files []*ast.File
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			files = append(files, f)
		}
	}
	have := map[string]bool{}
	for _, ex := range doc.Examples(files...) {
		if ex.Output == "" && !ex.EmptyOutput {
			t.Errorf("Example%s has no // Output: comment, so go test only compiles it", ex.Name)
		}
		have[ex.Name] = true
	}
	for _, want := range []string{"", "Context_Stream", "Context_Generate", "Model_Tokenize", "Sequence_Cancel"} {
		if !have[want] {
			t.Errorf("no Example%s", want)
		}
	}
}
