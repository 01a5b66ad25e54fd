// Package check holds the tests of deploy/kubernetes in a module of their
// own, so that the Kubernetes API types they check the manifests against
// stay out of the product's go.mod: every document is decoded strictly
// into its type (an unknown field fails, named), the references between
// them are checked, and the ConfigMaps' Corefiles run, with the image, in
// containers named and wired as a StatefulSet's pods are.
package check
