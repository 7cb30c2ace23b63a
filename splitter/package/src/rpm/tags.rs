//! rpm's numbers: tag value types, header tags, dependency sense flags,
//! file flags and the tag groups the writer emits together (rpmtag.h
//! numbering).

// Tag value types.
pub(super) const T_INT16: u32 = 3;
pub(super) const T_INT32: u32 = 4;
pub(super) const T_INT64: u32 = 5;
pub(super) const T_STRING: u32 = 6;
pub(super) const T_BIN: u32 = 7;
pub(super) const T_STRING_ARRAY: u32 = 8;
pub(super) const T_I18NSTRING: u32 = 9;

/// Header tags used here (rpmtag.h numbering).
#[allow(missing_docs)]
pub mod tag {
    pub const HEADERSIGNATURES: u32 = 62;
    pub const HEADERIMMUTABLE: u32 = 63;
    pub const HEADERI18NTABLE: u32 = 100;
    pub const SIG_SIZE: u32 = 1000;
    pub const SIG_MD5: u32 = 1004;
    pub const SIG_PAYLOADSIZE: u32 = 1007;
    pub const SIG_SHA1: u32 = 269;
    pub const SIG_SHA256: u32 = 273;
    pub const SIG_LONGSIZE: u32 = 270;
    pub const SIG_LONGARCHIVESIZE: u32 = 271;
    pub const NAME: u32 = 1000;
    pub const VERSION: u32 = 1001;
    pub const RELEASE: u32 = 1002;
    pub const EPOCH: u32 = 1003;
    pub const SUMMARY: u32 = 1004;
    pub const DESCRIPTION: u32 = 1005;
    pub const BUILDTIME: u32 = 1006;
    pub const BUILDHOST: u32 = 1007;
    pub const SIZE: u32 = 1009;
    pub const VENDOR: u32 = 1011;
    pub const LICENSE: u32 = 1014;
    pub const PACKAGER: u32 = 1015;
    pub const GROUP: u32 = 1016;
    pub const URL: u32 = 1020;
    pub const OS: u32 = 1021;
    pub const ARCH: u32 = 1022;
    pub const PREIN: u32 = 1023;
    pub const POSTIN: u32 = 1024;
    pub const PREUN: u32 = 1025;
    pub const POSTUN: u32 = 1026;
    pub const FILESIZES: u32 = 1028;
    pub const FILEMODES: u32 = 1030;
    pub const FILERDEVS: u32 = 1033;
    pub const FILEMTIMES: u32 = 1034;
    pub const FILEDIGESTS: u32 = 1035;
    pub const FILELINKTOS: u32 = 1036;
    pub const FILEFLAGS: u32 = 1037;
    pub const FILEUSERNAME: u32 = 1039;
    pub const FILEGROUPNAME: u32 = 1040;
    pub const SOURCERPM: u32 = 1044;
    pub const CHANGELOGTIME: u32 = 1080;
    pub const CHANGELOGNAME: u32 = 1081;
    pub const CHANGELOGTEXT: u32 = 1082;
    pub const FILEVERIFYFLAGS: u32 = 1045;
    pub const PROVIDENAME: u32 = 1047;
    pub const REQUIREFLAGS: u32 = 1048;
    pub const REQUIRENAME: u32 = 1049;
    pub const REQUIREVERSION: u32 = 1050;
    pub const CONFLICTFLAGS: u32 = 1053;
    pub const CONFLICTNAME: u32 = 1054;
    pub const CONFLICTVERSION: u32 = 1055;
    pub const RPMVERSION: u32 = 1064;
    pub const PREINPROG: u32 = 1085;
    pub const POSTINPROG: u32 = 1086;
    pub const PREUNPROG: u32 = 1087;
    pub const POSTUNPROG: u32 = 1088;
    pub const FILEDEVICES: u32 = 1095;
    pub const FILEINODES: u32 = 1096;
    pub const FILELANGS: u32 = 1097;
    pub const PROVIDEFLAGS: u32 = 1112;
    pub const PROVIDEVERSION: u32 = 1113;
    pub const OBSOLETENAME: u32 = 1090;
    pub const RECOMMENDNAME: u32 = 5046;
    pub const RECOMMENDVERSION: u32 = 5047;
    pub const RECOMMENDFLAGS: u32 = 5048;
    pub const OBSOLETEFLAGS: u32 = 1114;
    pub const OBSOLETEVERSION: u32 = 1115;
    pub const DIRINDEXES: u32 = 1116;
    pub const BASENAMES: u32 = 1117;
    pub const DIRNAMES: u32 = 1118;
    pub const PAYLOADFORMAT: u32 = 1124;
    pub const PAYLOADCOMPRESSOR: u32 = 1125;
    pub const PAYLOADFLAGS: u32 = 1126;
    pub const LONGFILESIZES: u32 = 5008;
    pub const LONGSIZE: u32 = 5009;
    pub const FILEDIGESTALGO: u32 = 5011;
    pub const ENCODING: u32 = 5062;
    pub const FILETRIGGERSCRIPTS: u32 = 5066;
    pub const FILETRIGGERSCRIPTPROG: u32 = 5067;
    pub const FILETRIGGERNAME: u32 = 5069;
    pub const FILETRIGGERINDEX: u32 = 5070;
    pub const FILETRIGGERVERSION: u32 = 5071;
    pub const FILETRIGGERFLAGS: u32 = 5072;
    pub const FILETRIGGERPRIORITIES: u32 = 5084;
    pub const TRANSFILETRIGGERSCRIPTS: u32 = 5076;
    pub const TRANSFILETRIGGERSCRIPTPROG: u32 = 5077;
    pub const TRANSFILETRIGGERNAME: u32 = 5079;
    pub const TRANSFILETRIGGERINDEX: u32 = 5080;
    pub const TRANSFILETRIGGERVERSION: u32 = 5081;
    pub const TRANSFILETRIGGERFLAGS: u32 = 5082;
    pub const TRANSFILETRIGGERPRIORITIES: u32 = 5085;
    pub const PAYLOADDIGEST: u32 = 5092;
    pub const PAYLOADDIGESTALGO: u32 = 5093;
}

/// Dependency sense flags.
pub mod sense {
    /// `<`
    pub const LESS: u32 = 1 << 1;
    /// `>`
    pub const GREATER: u32 = 1 << 2;
    /// `=`
    pub const EQUAL: u32 = 1 << 3;
    /// Requires(pre)
    pub const PREREQ: u32 = 1 << 6;
    /// Requires(pre)
    pub const SCRIPT_PRE: u32 = 1 << 9;
    /// Requires(post)
    pub const SCRIPT_POST: u32 = 1 << 10;
    /// rpmlib() dependency
    pub const RPMLIB: u32 = 1 << 24;
    /// A trigger that runs after the files are installed.
    pub const TRIGGERIN: u32 = 1 << 16;
    /// A trigger that runs before the files are removed.
    pub const TRIGGERUN: u32 = 1 << 17;
    /// A trigger that runs after the files are removed.
    pub const TRIGGERPOSTUN: u32 = 1 << 18;
}

/// rpm's default file-trigger priority (what rpmbuild writes).
pub(super) const FILE_TRIGGER_PRIORITY: u32 = 1_000_000;

pub(super) const FILE_CONFIG: u32 = 1 << 0;
pub(super) const FILE_DOC: u32 = 1 << 1;

/// Install scriptlets: (script tag, interpreter tag) pairs.
pub const SCRIPT_TAGS: [(u32, u32); 4] = [
    (tag::PREIN, tag::PREINPROG),
    (tag::POSTIN, tag::POSTINPROG),
    (tag::PREUN, tag::PREUNPROG),
    (tag::POSTUN, tag::POSTUNPROG),
];
pub(super) const PGPHASHALGO_SHA256: u32 = 8;

/// The tags of one kind of file trigger: scripts, programs, names,
/// indexes, versions, flags, priorities.
pub(super) type TriggerTags = [u32; 7];
pub(super) const FILE_TRIGGER_TAGS: TriggerTags = [
    tag::FILETRIGGERSCRIPTS,
    tag::FILETRIGGERSCRIPTPROG,
    tag::FILETRIGGERNAME,
    tag::FILETRIGGERINDEX,
    tag::FILETRIGGERVERSION,
    tag::FILETRIGGERFLAGS,
    tag::FILETRIGGERPRIORITIES,
];
pub(super) const TRANS_FILE_TRIGGER_TAGS: TriggerTags = [
    tag::TRANSFILETRIGGERSCRIPTS,
    tag::TRANSFILETRIGGERSCRIPTPROG,
    tag::TRANSFILETRIGGERNAME,
    tag::TRANSFILETRIGGERINDEX,
    tag::TRANSFILETRIGGERVERSION,
    tag::TRANSFILETRIGGERFLAGS,
    tag::TRANSFILETRIGGERPRIORITIES,
];
