package realnode

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Image is a container image assembled from files of this machine, one
// layer, written as an OCI image archive that `ctr images import` takes:
// no registry and no container engine are involved.
type Image struct {
	// Names are the references the image is imported under, fully
	// qualified (docker.io/library/busybox:latest).
	Names []string
	Files []File
	// Entrypoint, Cmd, Env and WorkingDir are the image's run defaults.
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
}

// File is one entry of the image's layer: a copy of a host file (Source),
// literal content (Data), a symbolic link (Link) or, with none of them, a
// directory.
type File struct {
	Path   string
	Source string
	Data   []byte
	Link   string
	Mode   os.FileMode
}

// layerTime is every entry's modification time, so that the same files
// give the same layer digest.
var layerTime = time.Unix(0, 0).UTC()

// WriteArchive writes the image as an OCI image layout in a tar archive.
func (img Image) WriteArchive(file string) error {
	layer, err := img.layer()
	if err != nil {
		return err
	}
	layerDigest := digest.FromBytes(layer)
	config, err := json.Marshal(ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Config: ocispec.ImageConfig{
			Entrypoint: img.Entrypoint, Cmd: img.Cmd, Env: img.Env, WorkingDir: img.WorkingDir,
		},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layerDigest}},
	})
	if err != nil {
		return err
	}
	configDigest := digest.FromBytes(config)
	manifest, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: configDigest, Size: int64(len(config))},
		Layers:    []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayer, Digest: layerDigest, Size: int64(len(layer))}},
	})
	if err != nil {
		return err
	}
	manifestDigest := digest.FromBytes(manifest)
	index := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}
	for _, name := range img.Names {
		index.Manifests = append(index.Manifests, ocispec.Descriptor{
			MediaType: ocispec.MediaTypeImageManifest, Digest: manifestDigest, Size: int64(len(manifest)),
			Platform:    &ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
			Annotations: map[string]string{"io.containerd.image.name": name, ocispec.AnnotationRefName: name},
		})
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	layout, _ := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})

	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, e := range []struct {
		name string
		data []byte
	}{
		{ocispec.ImageLayoutFile, layout},
		{"index.json", indexJSON},
		{blobPath(layerDigest), layer},
		{blobPath(configDigest), config},
		{blobPath(manifestDigest), manifest},
	} {
		if err := writeTarFile(tw, e.name, e.data, 0o644); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(file, out.Bytes(), 0o644)
}

func blobPath(d digest.Digest) string {
	return path.Join("blobs", d.Algorithm().String(), d.Encoded())
}

func writeTarFile(tw *tar.Writer, name string, data []byte, mode int64) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), ModTime: layerTime, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// layer is the uncompressed tar of the image's files, parents first.
func (img Image) layer() ([]byte, error) {
	files := map[string]File{}
	for _, f := range img.Files {
		p := strings.TrimPrefix(path.Clean("/"+f.Path), "/")
		for dir := path.Dir(p); dir != "." && dir != "/"; dir = path.Dir(dir) {
			if _, ok := files[dir]; !ok {
				files[dir] = File{Path: dir}
			}
		}
		f.Path = p
		files[p] = f
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		if err := writeEntry(tw, files[p]); err != nil {
			return nil, fmt.Errorf("image file /%s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func writeEntry(tw *tar.Writer, f File) error {
	switch {
	case f.Link != "":
		return tw.WriteHeader(&tar.Header{Name: f.Path, Linkname: f.Link, Typeflag: tar.TypeSymlink, Mode: 0o777, ModTime: layerTime})
	case f.Source != "":
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return err
		}
		mode := f.Mode
		if mode == 0 {
			st, err := os.Stat(f.Source)
			if err != nil {
				return err
			}
			mode = st.Mode().Perm()
		}
		return writeTarFile(tw, f.Path, data, int64(mode))
	case f.Data != nil:
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		return writeTarFile(tw, f.Path, f.Data, int64(mode))
	default:
		mode := f.Mode
		if mode == 0 {
			mode = 0o755
		}
		return tw.WriteHeader(&tar.Header{Name: f.Path + "/", Typeflag: tar.TypeDir, Mode: int64(mode), ModTime: layerTime})
	}
}

// BusyboxNames are the references the busybox image answers to: pods
// that name these common images run it.
var BusyboxNames = []string{
	"docker.io/library/busybox:latest",
	"docker.io/library/busybox:1.36",
	"docker.io/library/ubuntu:22.04",
	"docker.io/library/ubuntu:24.04",
	"docker.io/library/ubuntu:latest",
	"docker.io/library/debian:12",
	PauseImage,
}

// PauseImage is the sandbox image containerd is configured with; the
// busybox image serves as it (its default command sleeps).
const PauseImage = "strata.local/pause:1"

// BusyboxImage is a small image of a statically linked busybox: every
// applet as a link in /bin, a root user, and "sleep infinity" as its
// default command, so it also serves as the sandbox (pause) image.
func BusyboxImage(busybox string) (Image, error) {
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return Image{}, fmt.Errorf("%s --list: %w", busybox, err)
	}
	img := Image{
		Names: BusyboxNames,
		Cmd:   []string{"sleep", "infinity"},
		Env:   []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Files: append(baseFiles(), File{Path: "/bin/busybox", Source: busybox, Mode: 0o755},
			File{Path: "/usr/bin/env", Link: "/bin/busybox"}),
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" {
			img.Files = append(img.Files, File{Path: "/bin/" + applet, Link: "busybox"})
		}
	}
	return img, nil
}

// baseFiles are what a distroless base image has besides libraries: the
// root user and a temporary folder.
func baseFiles() []File {
	return []File{
		{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\nnonroot:x:65532:65532:nonroot:/home/nonroot:/bin/false\n")},
		{Path: "/etc/group", Data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{Path: "/tmp", Mode: 0o1777},
		{Path: "/root", Mode: 0o700},
	}
}

// BinaryImage is the image the Dockerfile's target of a Strata binary
// builds, assembled from a binary of make build: the program at
// /usr/bin/<name> as the entry point, with the dynamic loader and exactly
// the shared libraries its ELF header names (resolved on this machine,
// glibc as in the distroless base image), and no shell. A library the
// program needs and the image lacks makes its container fail to start.
func BinaryImage(name, binary string, names ...string) (Image, error) {
	libs, err := sharedLibraries(binary)
	if err != nil {
		return Image{}, err
	}
	img := Image{
		Names:      names,
		Entrypoint: []string{"/usr/bin/" + name},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Files:      append(baseFiles(), File{Path: "/usr/bin/" + name, Source: binary, Mode: 0o755}),
	}
	for _, lib := range libs {
		img.Files = append(img.Files, File{Path: lib.path, Source: lib.source})
	}
	return img, nil
}

type library struct{ path, source string }

// libraryDirs is where the dynamic loader of a Debian system looks.
func libraryDirs() []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	return []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
}

// sharedLibraries returns a program's interpreter and the transitive
// closure of its DT_NEEDED libraries, each at the path the loader finds
// it at, with the file that holds it (links followed).
func sharedLibraries(binary string) ([]library, error) {
	var out []library
	seen := map[string]bool{}
	var visit func(file string, interp bool) error
	visit = func(file string, interp bool) error {
		f, err := elf.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		if interp {
			for _, p := range f.Progs {
				if p.Type != elf.PT_INTERP {
					continue
				}
				data, err := io.ReadAll(p.Open())
				if err != nil {
					return err
				}
				loader := strings.TrimRight(string(data), "\x00")
				if err := add(&out, seen, loader); err != nil {
					return err
				}
			}
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			return err
		}
		for _, lib := range needed {
			found := ""
			for _, dir := range libraryDirs() {
				if _, err := os.Stat(filepath.Join(dir, lib)); err == nil {
					found = filepath.Join(dir, lib)
					break
				}
			}
			if found == "" {
				return fmt.Errorf("%s needs %s, which is not in %v", file, lib, libraryDirs())
			}
			if seen[found] {
				continue
			}
			if err := add(&out, seen, found); err != nil {
				return err
			}
			if err := visit(found, false); err != nil {
				return err
			}
		}
		return nil
	}
	if err := visit(binary, true); err != nil {
		return nil, err
	}
	return out, nil
}

func add(out *[]library, seen map[string]bool, p string) error {
	if seen[p] {
		return nil
	}
	seen[p] = true
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return fmt.Errorf("library %s: %w", p, err)
	}
	if real == "" {
		return errors.New("empty library path")
	}
	*out = append(*out, library{path: p, source: real})
	return nil
}
