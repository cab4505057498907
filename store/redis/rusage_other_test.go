//go:build !unix

package redis

// processCPU cannot be read here: -1.
func processCPU() float64 { return -1 }
