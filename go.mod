module github.com/ibpath/ibpath

go 1.26
