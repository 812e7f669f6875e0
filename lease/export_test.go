package lease

// LuaPreludeForTest lets tests run the shared Lua helpers directly.
var LuaPreludeForTest = luaPrelude
