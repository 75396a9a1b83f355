//go:build !unix

package main

import "log"

// checkFileLimit: only Unix systems limit open files this way.
func checkFileLimit(need int, logger *log.Logger) {}
