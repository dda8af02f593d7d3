package dbtest

// ContainerURL is containerURL, for the tests.
var ContainerURL = containerURL
