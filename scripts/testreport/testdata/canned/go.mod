module example.com/canned

go 1.26
