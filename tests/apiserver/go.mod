module kprism/apiserver

go 1.19
