package data

import (
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// remoteFile is a distribution file and its official MD5.
type remoteFile struct{ name, md5 string }

// md5Sum hashes what is written to it and compares with an expected sum.
type md5Sum struct {
	hash.Hash
	want string
}

func newSum(want string) *md5Sum { return &md5Sum{md5.New(), want} }

// check compares the sum with the expected one; no expectation passes.
func (s *md5Sum) check(path string) error {
	if s.want == "" {
		return nil
	}
	if got := hex.EncodeToString(s.Sum(nil)); got != s.want {
		return fmt.Errorf("%s: md5 %s, want the official %s: the file is damaged or not the original; delete it and fedpq downloads it again, or replace it", path, got, s.want)
	}
	return nil
}

// locate finds each wanted file (want[i] lists its acceptable names, the
// first the canonical one) in the dataset's directories under o.Dir, in
// order. If some are missing and downloads are allowed, fetch is asked to
// put them in the first directory. The error for files still missing names
// them, the directories searched and how to provide them.
func locate(dataset string, o Options, subdirs []string, want [][]string, fetch func(dir string, missing []int) error) ([]string, error) {
	dirs := make([]string, len(subdirs))
	for i, s := range subdirs {
		dirs[i] = filepath.Join(o.Dir, s)
	}
	find := func() (paths []string, missing []int) {
		paths = make([]string, len(want))
	files:
		for i, names := range want {
			for _, d := range dirs {
				for _, n := range names {
					p := filepath.Join(d, n)
					if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
						paths[i] = p
						continue files
					}
				}
			}
			missing = append(missing, i)
		}
		return paths, missing
	}
	paths, missing := find()
	if len(missing) == 0 {
		return paths, nil
	}
	var cause error
	switch {
	case o.Offline:
		cause = errors.New("downloads are off")
	default:
		_, statErr := os.Stat(dirs[0])
		made := errors.Is(statErr, os.ErrNotExist)
		if cause = os.MkdirAll(dirs[0], 0o755); cause == nil {
			cause = fetch(dirs[0], missing)
		}
		if cause != nil && made {
			os.Remove(dirs[0]) // a download that failed leaves no empty directory behind (Remove keeps a non-empty one)
		}
		if cause == nil {
			if paths, missing = find(); len(missing) == 0 {
				return paths, nil
			}
			cause = errors.New("files still missing after download")
		}
	}
	var miss, all []string
	for _, i := range missing {
		miss = append(miss, want[i][0])
	}
	for _, names := range want {
		all = append(all, names[0])
	}
	// What to do first; where else it looked and why the download failed
	// after, in one line a log keeps readable.
	return nil, fmt.Errorf("data: %s: missing %s. Put the files (%s) in %s, or point --data-dir or $%s at a directory that holds them (looked in %s; download: %v)",
		dataset, strings.Join(miss, ", "), strings.Join(all, ", "), dirs[0], EnvDir, strings.Join(dirs, ", "), cause)
}

// client bounds every stage of a download so an offline machine fails in
// seconds and a stalled server does not hang a run.
var client = &http.Client{
	Timeout: 15 * time.Minute,
	Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 15 * time.Second}).DialContext,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
	},
}

// fetchMirrors downloads f into dir from the first mirror that serves it
// with the right checksum. Its error names the mirrors' hosts and only the
// first mirror's error, without the URL: offline, every mirror fails the
// same way, and three DNS errors would bury what the user has to do.
func fetchMirrors(mirrors []string, f remoteFile, dir string) error {
	var first error
	var hosts []string
	for _, m := range mirrors {
		err := download(m+f.name, filepath.Join(dir, f.name), f.md5)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
		host := m
		if u, perr := url.Parse(m); perr == nil && u.Host != "" {
			host = u.Host
		}
		hosts = append(hosts, host)
	}
	var ue *url.Error
	if errors.As(first, &ue) {
		first = ue.Err
	}
	return fmt.Errorf("no mirror served %s (%s): %v", f.name, strings.Join(hosts, ", "), first)
}

// download saves url at dst only if its MD5 is want: the data goes to a
// temporary file in dst's directory, renamed into place once verified, so a
// failed or corrupt download never leaves a file that looks complete.
func download(url, dst, want string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".fedpq-download-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	sum := newSum(want)
	_, err = io.Copy(io.MultiWriter(tmp, sum), resp.Body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	if err := sum.check(url); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
