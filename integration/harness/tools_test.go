package harness

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// byName are the commands a test may run by name: the Go toolchain that
// runs the tests, and mount and umount, which every Linux system has.
var byName = map[string]bool{"go": true, "mount": true, "umount": true}

// TestToolsChecked: no test runs an external tool by its name
// (exec.Command("dig", ...)): each takes the tool's path from RequireTool,
// RequireDocker or dnsdiff's requireServer, which fail under CI=true and
// skip elsewhere when the tool is missing, so that a missing tool is
// reported as such instead of as an exec error in the middle of a test.
func TestToolsChecked(t *testing.T) {
	root := findRepo(t)
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "data", "bench", "cmd", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok || pkg.Name != "exec" {
				return true
			}
			arg := 0
			switch sel.Sel.Name {
			case "Command", "LookPath":
			case "CommandContext":
				arg = 1
			default:
				return true
			}
			if len(call.Args) <= arg {
				return true
			}
			lit, ok := call.Args[arg].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			if !byName[name] {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d runs %q by name: take its path from harness.RequireTool (or RequireDocker) first", rel, fset.Position(lit.Pos()).Line, name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// findRepo is the directory above the working directory that holds
// plugin.cfg.
func findRepo(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "plugin.cfg")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no plugin.cfg above the working directory")
		}
		dir = parent
	}
}
