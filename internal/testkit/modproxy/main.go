// Command modproxy adds a module, as a directory holds it, to a module
// proxy on disk (the layout GOPROXY=file://DIR reads), so that CI can
// build a consumer that requires a sub-module alone, the way a project
// would through a real proxy:
//
//	go run ./internal/testkit/modproxy -out DIR -module PATH -version V -src DIR
//
// The zip holds the module's files as the go command packs them: every
// regular file under src, without the directories of nested modules (a
// go.mod of their own), .git, or vendor.
package main

import (
	"archive/zip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	out := flag.String("out", "", "the proxy's directory")
	mod := flag.String("module", "", "the module path")
	version := flag.String("version", "", "the version to serve it as")
	src := flag.String("src", "", "the module's directory (holding its go.mod)")
	flag.Parse()
	if *out == "" || *mod == "" || *version == "" || *src == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := add(*out, *mod, *version, *src); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// add writes the .info, .mod and .zip of mod@version from src into the
// proxy at out, and lists the version.
func add(out, mod, version, src string) error {
	escaped, err := escape(mod)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return err
	}
	if first := strings.SplitN(string(gomod), "\n", 2)[0]; strings.TrimSpace(strings.TrimPrefix(first, "module")) != mod {
		return fmt.Errorf("%s/go.mod says %q, not module %s", src, first, mod)
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err := os.WriteFile(filepath.Join(dir, version+".info"), info, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, version+".mod"), gomod, 0o644); err != nil {
		return err
	}
	if err := writeZip(filepath.Join(dir, version+".zip"), mod+"@"+version, src); err != nil {
		return err
	}
	list, err := os.OpenFile(filepath.Join(dir, "list"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(list, version)
	return errors.Join(err, list.Close())
}

// writeZip packs the module's files under prefix/.
func writeZip(name, prefix, src string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(f)
	walkErr := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if rel != "." {
				base := d.Name()
				if base == ".git" || base == "vendor" {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // a nested module is a module of its own
				}
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		w, err := zw.Create(path.Join(prefix, filepath.ToSlash(rel)))
		if err != nil {
			return err
		}
		r, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(w, r)
		return errors.Join(err, r.Close())
	})
	return errors.Join(walkErr, zw.Close(), f.Close())
}

// escape writes a module path as the proxy protocol names it: each upper
// case letter as '!' and its lower case.
func escape(mod string) (string, error) {
	var b strings.Builder
	for _, r := range mod {
		switch {
		case r >= 'A' && r <= 'Z':
			b.WriteByte('!')
			b.WriteRune(r + 'a' - 'A')
		case r == '!' || r > 0x7e || r < 0x21:
			return "", fmt.Errorf("module path %q: character %q", mod, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}
